import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { getMailAccountPassword } from '../../src/mail/accounts.ts';
import { parseAllowList } from '../../src/lib/net-guard.ts';
import { transportOptions } from '../../src/mail/transport.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { startSmtpSink, type SmtpSink } from './smtp-sink.ts';

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('mail accounts: create, list, get', () => {
  let t: TestApp;
  let smtp: SmtpSink;
  before(async () => {
    t = await buildTestApp();
    smtp = await startSmtpSink('mailer', 's3cret pass');
  });
  after(async () => {
    await smtp.close();
    await t.close();
  });

  const create = (key: string, body: Record<string, unknown>) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key }, payload: body });

  test('create answers 201 with the account, defaults applied, no secret', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const res = await create(key, {
      host: 'smtp.example.com',
      port: 587,
      security: 'starttls',
      username: 'mailer',
      password: 'hunter2hunter2',
      from_email: 'news@example.com',
      from_name: 'Example News',
    });
    assert.equal(res.statusCode, 201, res.body);
    const body = res.json();
    assert.equal(body.ok, true);
    const acc = body.mail_account;
    assert.deepEqual(Object.keys(acc).sort(), [
      'campaign_share_percent', 'capture_replies', 'created_at', 'daily_limit', 'email', 'from_email', 'from_name', 'host', 'id', 'imap', 'max_per_minute', 'port',
      'security', 'status', 'team_id', 'updated_at', 'username', 'verp',
    ]);
    assert.equal(acc.imap, null);
    assert.match(acc.id, UUID);
    assert.equal(acc.team_id, teamId);
    assert.equal(acc.host, 'smtp.example.com');
    assert.equal(acc.port, 587);
    assert.equal(acc.security, 'starttls');
    assert.equal(acc.username, 'mailer');
    assert.equal(acc.from_email, 'news@example.com');
    assert.equal(acc.from_name, 'Example News');
    assert.equal(acc.email, acc.from_email, 'what existing clients show in their account picker');
    assert.equal(acc.daily_limit, 500);
    assert.equal(acc.campaign_share_percent, 90);
    assert.equal(acc.status, 'active');
    assert.match(acc.created_at, ISO);
    assert.match(acc.updated_at, ISO);
    assert.equal(await getMailAccountPassword(t.database.db, process.env.APP_SECRET!, teamId, acc.id), 'hunter2hunter2');
  });

  test('an account without credentials, an IP host and a daily limit', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const res = await create(key, { host: '93.184.215.14', port: 25, security: 'none', from_email: 'Relay@Example.COM', daily_limit: 1_000_000 });
    assert.equal(res.statusCode, 201, res.body);
    const acc = res.json().mail_account;
    assert.equal(acc.host, '93.184.215.14');
    assert.equal(acc.username, null);
    assert.equal(acc.from_name, null);
    assert.equal(acc.from_email, 'relay@example.com', 'e-mail addresses are lower-cased');
    assert.equal(acc.daily_limit, 1_000_000);
    const row = await t.database.db.selectFrom('mail_accounts').select('password_enc').where('id', '=', acc.id).executeTakeFirstOrThrow();
    assert.equal(row.password_enc, null);
    assert.equal(await getMailAccountPassword(t.database.db, process.env.APP_SECRET!, teamId, acc.id), null);
    const v6 = await create(key, { host: '::1', port: 25, security: 'none', from_email: 'a@example.com' });
    assert.equal(v6.statusCode, 201, v6.body);
  });

  test('verify: true logs in to a real SMTP server before saving', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const seen = smtp.logins.length;
    const res = await create(key, {
      host: '127.0.0.1',
      port: smtp.port,
      security: 'none',
      username: 'mailer',
      password: 's3cret pass',
      from_email: 'me@example.com',
      verify: true,
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.deepEqual(smtp.logins.slice(seen), [{ username: 'mailer', password: 's3cret pass', accepted: true }]);
    const acc = res.json().mail_account;
    assert.equal(acc.port, smtp.port);
    assert.equal(await getMailAccountPassword(t.database.db, process.env.APP_SECRET!, teamId, acc.id), 's3cret pass');
  });

  test('list: newest first, paginated, with string meta', async () => {
    const { key } = await makeTeam(t.database.db);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await create(key, { host: `smtp${i}.example.com`, port: 465, security: 'tls', from_email: `a${i}@example.com` });
      ids.push(res.json().mail_account.id);
    }
    const list = await t.app.inject({ url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key } });
    assert.equal(list.statusCode, 200, list.body);
    const body = list.json();
    assert.equal(body.ok, true);
    assert.deepEqual(body.mail_accounts.map((a: { id: string }) => a.id), [...ids].reverse());
    assert.deepEqual(body.meta, { current_page: '1', per_page: 20, total: '3', last_page: '1' });
    const page2 = (await t.app.inject({ url: '/public/v1/email/mail-accounts?per_page=2&page=2', headers: { 'x-api-key': key } })).json();
    assert.deepEqual(page2.mail_accounts.map((a: { id: string }) => a.id), [ids[0]]);
    assert.deepEqual(page2.meta, { current_page: '2', per_page: 2, total: '3', last_page: '2' });
  });

  test('get returns one account', async () => {
    const { key } = await makeTeam(t.database.db);
    const acc = (await create(key, { host: 'smtp.example.com', port: 2525, security: 'starttls', from_email: 'x@example.com' })).json()
      .mail_account;
    const res = await t.app.inject({ url: `/public/v1/email/mail-accounts/${acc.id}`, headers: { 'x-api-key': key } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, mail_account: acc });
  });

  test('transportOptions maps security to nodemailer options', () => {
    const base = { host: 'h', port: 1, username: 'u' };
    const tls = transportOptions({ ...base, security: 'tls' }, 'p', parseAllowList([]));
    assert.equal(tls.secure, true);
    assert.equal(tls.requireTLS, false);
    assert.equal(tls.ignoreTLS, false);
    assert.deepEqual(tls.auth, { user: 'u', pass: 'p' });
    const starttls = transportOptions({ ...base, security: 'starttls' }, 'p', parseAllowList([]));
    assert.deepEqual([starttls.secure, starttls.requireTLS, starttls.ignoreTLS], [false, true, false]);
    const none = transportOptions({ ...base, security: 'none', username: null }, null, parseAllowList([]));
    assert.deepEqual([none.secure, none.requireTLS, none.ignoreTLS], [false, false, true]);
    assert.equal(none.auth, undefined);
    assert.equal(none.connectionTimeout, 10_000);
    assert.equal(none.greetingTimeout, 10_000);
    assert.equal(none.socketTimeout, 10_000);
  });
});
