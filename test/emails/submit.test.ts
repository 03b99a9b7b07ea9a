// POST /email/emails/submit against a real SMTP server on 127.0.0.1: what the
// recipient gets (variables, contact, headers), idempotent replay, suppression
// after a hard bounce, unsubscribed contacts, and the account's daily limit.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { drain, drainFailures } from '../engine/fixtures.ts';
import { decodeHeader, parseMessage, startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { rowsOf, sendJobsFor, txSetup } from './fixtures.ts';

describe('transactional submit', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    t = await buildTestApp();
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  const atSink = (to: string) => sink.messages.filter((m) => m.to.includes(to));

  test('variables at the top level and under `variables`, the contact by address, and every header override', async () => {
    const s = await txSetup(t, sink.port);
    const up = await s.c.post('/email/contacts/upsert', { email: 'ada@example.com', first_name: 'Ada' });
    assert.equal(up.statusCode, 200, up.body);
    const contactId = up.json().contact.id;
    const res = await s.c.post('/email/emails/submit', {
      template_id: s.templateId, mail_account_id: s.accountId, to_email: 'Ada@Example.com', to_name: 'Ada Lovelace',
      from_name: 'Shop Receipts', reply_to: 'help@shop.test', subject: 'Your order {{ order_id }} <b>',
      variables: { order_id: 'A-17', total: '12.50 EUR' },
    });
    assert.equal(res.statusCode, 202, res.body);
    const email = res.json().email;
    assert.equal(email.status, 'queued');
    assert.equal(email.to_email, 'ada@example.com');
    assert.equal(email.to_name, 'Ada Lovelace');
    assert.equal(email.contact_id, contactId, 'linked to the team\'s contact with this address');
    assert.equal(email.template_id, s.templateId);
    assert.equal(email.mail_account_id, s.accountId);
    assert.ok(email.id && email.created_at);

    await drain(t);
    const [msg] = atSink('ada@example.com');
    assert.ok(msg, 'the e-mail reached the SMTP server');
    const m = parseMessage(msg.raw);
    assert.equal(decodeHeader(m.headers.get('subject')!), 'Your order A-17 <b>');
    assert.match(decodeHeader(m.headers.get('to')!), /"?Ada Lovelace"? <ada@example\.com>/);
    assert.match(decodeHeader(m.headers.get('from')!), /Shop Receipts.*<news@plover\.test>/);
    assert.match(m.headers.get('reply-to')!, /help@shop\.test/);
    assert.equal(m.headers.get('list-unsubscribe'), undefined, 'transactional mail carries no List-Unsubscribe');
    assert.match(m.html, /Hi Ada, order A-17 \(12\.50 EUR\)/);
    assert.ok(!/\/t\/o\/|width="1" height="1"/.test(m.html), 'no open pixel unless asked');

    const got = await s.c.get(`/email/emails/${email.id}`);
    assert.equal(got.statusCode, 200, got.body);
    assert.equal(got.json().email.status, 'sent');
    assert.equal(got.json().email.source, 'transactional');
    assert.equal(got.json().email.subject, 'Your order A-17 <b>');
    assert.deepEqual(got.json().email.events.map((e: any) => e.type), ['queued', 'sent']);
  });

  test('the contact by contact_id; without a contact `contact` is empty and nobody is created; unsubscribe_url brings the header', async () => {
    const s = await txSetup(t, sink.port, { content: '<p>Hi {{ contact.first_name | default: "guest" }} <a href="{{ unsubscribe_url }}">stop</a></p>' });
    const up = await s.c.post('/email/contacts/upsert', { email: 'bob@example.com', first_name: 'Bob' });
    const byId = await s.c.post('/email/emails/submit', {
      template_id: s.templateId, mail_account_id: s.accountId, to_email: 'bobby@work.test', contact_id: up.json().contact.id,
    });
    assert.equal(byId.statusCode, 202, byId.body);
    const none = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'nobody@example.com' });
    assert.equal(none.json().email.contact_id, null);
    await drain(t);
    const [bob] = atSink('bobby@work.test');
    assert.match(parseMessage(bob.raw).html, /Hi Bob/);
    const [guest] = atSink('nobody@example.com');
    const g = parseMessage(guest.raw);
    assert.match(g.html, /Hi guest/);
    assert.ok(g.headers.get('list-unsubscribe'), 'the template offers unsubscribing, so the header goes too');
    const contacts = await t.database.db.selectFrom('contacts').select('email').where('team_id', '=', s.teamId).execute();
    assert.deepEqual(contacts.map((c) => c.email), ['bob@example.com'], 'no contact was created');
  });

  test('idempotent replay: one e-mail; same key, other body 409; a 4xx is not stored', async () => {
    const s = await txSetup(t, sink.port);
    const body = { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'once@example.com', variables: { order_id: 1 } };
    const first = await s.c.post('/email/emails/submit', body, { 'idempotency-key': 'order-1' });
    const again = await s.c.post('/email/emails/submit', { ...body, idempotency_key: 'order-1' });
    assert.equal(first.statusCode, 202, first.body);
    assert.equal(again.statusCode, 202, again.body);
    assert.deepEqual(again.json(), first.json(), 'the first answer, again');
    const other = await s.c.post('/email/emails/submit', { ...body, variables: { order_id: 2 } }, { 'idempotency-key': 'order-1' });
    assert.equal(other.statusCode, 409, other.body);
    assert.equal(other.json().error.code, 'CONFLICT');

    const bad = await s.c.post('/email/emails/submit', { ...body, template_id: s.accountId }, { 'idempotency-key': 'order-2' });
    assert.equal(bad.statusCode, 422, bad.body);
    assert.deepEqual(bad.json().error.details.map((d: any) => d.field), ['template_id']);
    const fixed = await s.c.post('/email/emails/submit', { ...body, to_email: 'twice@example.com' }, { 'idempotency-key': 'order-2' });
    assert.equal(fixed.statusCode, 202, 'the key of a refused request is free for the corrected one');

    await drain(t);
    assert.equal(atSink('once@example.com').length, 1);
    assert.equal((await rowsOf(t, s.teamId)).length, 2);
  });

  test('a hard bounce suppresses the address: status bounced, then 422 RECIPIENT_SUPPRESSED; the account and template must be usable', async () => {
    const s = await txSetup(t, sink.port);
    const body = { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'hard-gone@example.com' };
    const res = await s.c.post('/email/emails/submit', body);
    assert.equal(res.statusCode, 202, res.body);
    await drain(t);
    const got = (await s.c.get(`/email/emails/${res.json().email.id}`)).json().email;
    assert.equal(got.status, 'bounced');
    const bounced = got.events.find((e: any) => e.type === 'bounced');
    assert.equal(bounced.detail.bounce_type, 'hard');
    assert.match(bounced.detail.reason, /550|No such user/);

    const again = await s.c.post('/email/emails/submit', body);
    assert.equal(again.statusCode, 422, again.body);
    assert.equal(again.json().error.code, 'RECIPIENT_SUPPRESSED');
    assert.equal((await rowsOf(t, s.teamId)).length, 1, 'nothing written for the refused submit');

    await t.database.db.updateTable('mail_accounts').set({ status: 'disabled' }).where('id', '=', s.accountId).execute();
    await t.database.db.updateTable('templates').set({ status: 'archived' }).where('id', '=', s.templateId).execute();
    const unusable = await s.c.post('/email/emails/submit', { ...body, to_email: 'fine@example.com' });
    assert.equal(unusable.statusCode, 422);
    assert.deepEqual(unusable.json().error.details.map((d: any) => d.field).sort(), ['mail_account_id', 'template_id']);
  });

  test('an unsubscribed contact still gets transactional mail', async () => {
    const s = await txSetup(t, sink.port);
    const un = await s.c.post('/email/contacts/unsubscribe', { email: 'left@example.com' });
    assert.equal(un.statusCode, 200, un.body);
    const res = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'left@example.com' });
    assert.equal(res.statusCode, 202, res.body);
    await drain(t);
    assert.equal(atSink('left@example.com').length, 1);
  });

  test('an account at its daily limit: the e-mail stays queued and waits for the next UTC day', async () => {
    const s = await txSetup(t, sink.port, {}, { daily_limit: 2 });
    const ids: string[] = [];
    const failures: string[] = [];
    for (const to of ['l1@example.com', 'l2@example.com', 'l3@example.com']) {
      const res = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: to });
      ids.push(res.json().email.id);
      await drain(t);
      failures.push(...drainFailures);
    }
    const statuses = await Promise.all(ids.map(async (id) => (await s.c.get(`/email/emails/${id}`)).json().email.status));
    assert.deepEqual(statuses, ['sent', 'sent', 'queued'], 'transactional mail may use the whole limit, not more');
    assert.equal(atSink('l3@example.com').length, 0);
    // The wake job by its key: the message's own job, had it failed and waited
    // for graphile-worker's retry, would be a second job for the same id.
    const wake = (await sendJobsFor(t, [ids[2]!])).find((j) => j.key === `send-next-day:${ids[2]}`);
    assert.ok(wake, `a wake job for the third message; job failures while draining: ${failures.join(' | ') || 'none'}`);
    const midnight = new Date();
    midnight.setUTCHours(24, 0, 0, 0);
    assert.equal(wake?.run_at.toISOString(), midnight.toISOString(), 'a job at the next UTC midnight');
    assert.equal(wake?.priority, -2);
  });
});
