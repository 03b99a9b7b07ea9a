// IMAP polling against a real IMAP server (dovecot on 127.0.0.1, see
// dovecot.ts): a DSN and a reply put into the mailbox come out as the
// listener's path makes them (bounce recorded, contact bounced and
// suppressed, email.bounced.hard and email.replied events); unmatched and
// oversize messages are marked seen and dropped; nothing is read twice; a
// failing mailbox records its error and backs off. Plus the settings API.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { ImapFlow } from 'imapflow';
import { pollDueMailboxes } from '../../src/inbound/imap/poll.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { dovecotMissing, startDovecot, type Dovecot } from './dovecot.ts';

const skip = dovecotMissing();
const MAX_BYTES = 64 * 1024;
const base = testConfig();
const config = testConfig({ inboundProviders: { ...base.inboundProviders, imapMaxMessageBytes: MAX_BYTES, imapPollIntervalS: 60, imapTimeoutMs: 30_000 } });

const fixture = (name: string, messageId: string) =>
  readFileSync(new URL(`../fixtures/inbound/${name}`, import.meta.url), 'latin1').replaceAll('@@MESSAGE_ID@@', messageId);

describe('IMAP polling', { skip }, () => {
  let t: TestApp;
  let imap: Dovecot;

  before(async () => {
    imap = await startDovecot();
    t = await buildTestApp({ config });
  });
  after(async () => {
    await t?.close();
    await imap?.stop();
  });

  const api = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1/email/mail-accounts${url}`, headers: { 'x-api-key': key }, payload: payload as object });

  async function account(key: string): Promise<string> {
    const res = await api(key, 'POST', '', { host: '127.0.0.1', port: 2525, security: 'none', from_email: 'news@example.com' });
    assert.equal(res.statusCode, 201, res.body);
    return res.json().mail_account.id;
  }

  async function sentMessage(teamId: string, email: string) {
    const { rows: [contact] } = await t.database.pool.query('INSERT INTO contacts (team_id, email) VALUES ($1, $2) RETURNING id', [teamId, email]);
    const id = randomUUID();
    await t.database.pool.query(
      "INSERT INTO email_send_log (id, team_id, contact_id, email, message_id, status, sent_at) VALUES ($1, $2, $3, $4, $5, 'sent', now())",
      [id, teamId, contact.id, email, `${id}@mail.example.com`],
    );
    return { id, contactId: contact.id as string, messageId: `${id}@mail.example.com` };
  }

  async function withMailbox<T>(fn: (c: ImapFlow) => Promise<T>): Promise<T> {
    const c = new ImapFlow({ host: '127.0.0.1', port: imap.port, secure: false, doSTARTTLS: false, auth: { user: imap.user, pass: imap.password }, logger: false });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.logout();
    }
  }

  test('settings: set, shown without the password, sealed at rest; another team 404; private and non-IMAP ports refused by the address rules', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const id = await account(key);
    const res = await api(key, 'PUT', `/${id}/imap`, { host: '127.0.0.1', port: imap.port, security: 'none', user: imap.user, password: imap.password });
    assert.equal(res.statusCode, 200, res.body);
    const shown = res.json().imap;
    assert.deepEqual([shown.host, shown.port, shown.security, shown.user, shown.folder, shown.last_error], ['127.0.0.1', imap.port, 'none', imap.user, 'INBOX', null]);
    assert.equal(JSON.stringify((await api(key, 'GET', `/${id}/imap`)).json()).includes(imap.password), false);
    const { rows } = await t.database.pool.query('SELECT password_enc FROM mail_account_imap WHERE mail_account_id = $1 AND team_id = $2', [id, teamId]);
    assert.equal(rows[0].password_enc.includes(Buffer.from(imap.password)), false);

    const other = await makeTeam(t.database.db);
    assert.equal((await api(other.key, 'GET', `/${id}/imap`)).statusCode, 404);
    assert.equal((await api(other.key, 'PUT', `/${id}/imap`, { host: '127.0.0.1', port: 143, user: 'u', password: 'p' })).statusCode, 404);
    assert.equal((await api(other.key, 'DELETE', `/${id}/imap`)).statusCode, 404);

    // The production rules (nothing private allowed): loopback refused; a public host only on 143 and 993.
    const strict = await buildTestApp({ config: { ...config, allowedPrivateTargets: [] }, database: t.database });
    try {
      const call = (body: object) => strict.app.inject({ method: 'PUT', url: `/public/v1/email/mail-accounts/${id}/imap`, headers: { 'x-api-key': key }, payload: body });
      let r = await call({ host: '127.0.0.1', port: 143, user: 'u', password: 'p' });
      assert.equal(r.statusCode, 422, r.body);
      assert.equal(r.json().error.details[0].field, 'imap.host');
      r = await call({ host: '0:0:0:0:0:ffff:7f00:1', port: 993, user: 'u', password: 'p' });
      assert.equal(r.statusCode, 422, r.body);
      r = await call({ host: '93.184.215.14', port: 2525, user: 'u', password: 'p' });
      assert.equal(r.statusCode, 422, r.body);
      assert.equal(r.json().error.details[0].field, 'imap.port');
      r = await call({ host: '93.184.215.14', port: 993, user: 'u', password: 'p' });
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.json().imap.security, 'tls');
    } finally {
      await strict.app.close();
    }
    assert.equal((await api(key, 'DELETE', `/${id}/imap`)).statusCode, 200);
    assert.equal((await api(key, 'GET', `/${id}/imap`)).statusCode, 404);
  });

  test('a DSN and a reply in the mailbox: bounce recorded, contact bounced and suppressed, events emitted; junk and oversize marked seen; nothing read twice', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const id = await account(key);
    assert.equal((await api(key, 'PUT', `/${id}/imap`, { host: '127.0.0.1', port: imap.port, security: 'none', user: imap.user, password: imap.password })).statusCode, 200);
    const bounced = await sentMessage(teamId, 'gone@example.net');
    const answered = await sentMessage(teamId, 'fan@example.net');
    const reply = [
      'From: Fan <fan@example.net>',
      'To: news@example.com',
      'Subject: Re: Hello',
      `Message-ID: <${randomUUID()}@example.net>`,
      `In-Reply-To: <${answered.messageId}>`,
      `References: <${answered.messageId}>`,
      'Date: Tue, 24 Nov 2026 12:00:00 +0000',
      'Content-Type: text/plain; charset=utf-8',
      '',
      'Thanks, see you there!',
      '',
    ].join('\r\n');
    const junk = 'From: someone@example.org\r\nTo: news@example.com\r\nSubject: hello\r\nMessage-ID: <junk@example.org>\r\n\r\nNot about any message of ours.\r\n';
    const huge = `From: big@example.org\r\nSubject: big\r\n\r\n${'x'.repeat(MAX_BYTES + 1024)}\r\n`;
    await withMailbox(async (c) => {
      for (const m of [fixture('postfix-hard-5.1.1.eml', bounced.messageId), reply, junk, huge]) await c.append('INBOX', m);
    });

    const warnings: object[] = [];
    const log = { info: () => {}, warn: (o: object) => void warnings.push(o) };
    const first = await pollDueMailboxes({ db: t.database.db, config, log });
    assert.deepEqual(first, { polled: 1, failed: 0 }, JSON.stringify(warnings));

    const { rows: [m] } = await t.database.pool.query('SELECT status, last_error FROM email_send_log WHERE id = $1', [bounced.id]);
    assert.equal(m.status, 'bounced_hard');
    const { rows: [c] } = await t.database.pool.query('SELECT status FROM contacts WHERE id = $1', [bounced.contactId]);
    assert.equal(c.status, 'bounced');
    const { rows: sup } = await t.database.pool.query("SELECT reason FROM suppressions WHERE team_id = $1 AND email = 'gone@example.net'", [teamId]);
    assert.deepEqual(sup.map((r) => r.reason), ['bounced_hard']);
    const events = async () =>
      (await t.database.pool.query('SELECT name, payload FROM events WHERE team_id = $1 ORDER BY name', [teamId])).rows as { name: string; payload: Record<string, unknown> }[];
    const after1 = await events();
    assert.deepEqual(after1.map((e) => e.name), ['email.bounced.hard', 'email.replied']);
    assert.equal(after1[0]!.payload.email_send_log_id, bounced.id);
    assert.equal(after1[1]!.payload.email_send_log_id, answered.id);
    const { rows: [fb] } = await t.database.pool.query("SELECT source, status_code FROM message_feedback WHERE email_send_log_id = $1", [bounced.id]);
    assert.deepEqual(fb, { source: 'imap', status_code: '5.1.1' });

    const unseen = await withMailbox(async (cl) => {
      const lock = await cl.getMailboxLock('INBOX');
      try {
        return (await cl.search({ seen: false }, { uid: true })) || [];
      } finally {
        lock.release();
      }
    });
    assert.deepEqual(unseen, [], 'every message is marked seen, the junk and the oversize one too');
    const box = (await api(key, 'GET', `/${id}/imap`)).json().imap;
    assert.equal(box.last_error, null);
    assert.equal(box.messages_processed, 4);
    assert.ok(box.last_polled_at);
    assert.ok(new Date(box.next_poll_at).getTime() > Date.now() + 30_000, 'the next poll waits for the interval');

    // Not due: nothing polled. Forced due: read again, nothing new, no second event.
    assert.deepEqual(await pollDueMailboxes({ db: t.database.db, config }), { polled: 0, failed: 0 });
    await t.database.pool.query('UPDATE mail_account_imap SET next_poll_at = now() WHERE mail_account_id = $1', [id]);
    assert.deepEqual(await pollDueMailboxes({ db: t.database.db, config }), { polled: 1, failed: 0 });
    assert.equal((await events()).length, 2);
  });

  test('a mailbox that fails (wrong password) records the error and backs off; the other mailboxes are still polled', async () => {
    const { key } = await makeTeam(t.database.db);
    const id = await account(key);
    assert.equal((await api(key, 'PUT', `/${id}/imap`, { host: '127.0.0.1', port: imap.port, security: 'none', user: imap.user, password: 'wrong' })).statusCode, 200);
    // Only this mailbox is due now (the other tests' mailboxes wait for their interval).
    const result = await pollDueMailboxes({ db: t.database.db, config });
    assert.deepEqual(result, { polled: 1, failed: 1 });
    const box = (await api(key, 'GET', `/${id}/imap`)).json().imap;
    assert.ok(box.last_error, 'the error is shown');
    const wait = new Date(box.next_poll_at).getTime() - Date.now();
    assert.ok(wait > 100_000, `backs off past the interval (next poll in ${wait} ms)`);
    const { rows: [row] } = await t.database.pool.query('SELECT failures FROM mail_account_imap WHERE mail_account_id = $1', [id]);
    assert.equal(row.failures, 1);
    // A second failure waits longer still.
    await t.database.pool.query('UPDATE mail_account_imap SET next_poll_at = now() WHERE mail_account_id = $1', [id]);
    await pollDueMailboxes({ db: t.database.db, config });
    const again = (await api(key, 'GET', `/${id}/imap`)).json().imap;
    assert.ok(new Date(again.next_poll_at).getTime() - Date.now() > wait + 60_000);
  });
});
