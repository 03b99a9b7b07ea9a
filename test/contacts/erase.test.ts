// Erasure (DELETE /email/contacts/{id}, POST /email/contacts/erase): after it,
// no column of any table of the database holds the address (or the contact's
// name) in clear. The tables and columns are discovered from the catalog when
// the test runs, so a table added later cannot escape it. Anonymous counts
// stay, the address stays suppressed (by its keyed hash), another team's rows
// are untouched.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { sql } from 'kysely';
import { closeTransports } from '../../src/mail/send.ts';
import { emailHmac } from '../../src/contacts/suppressions.ts';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.ts';
import { TrackingLinks } from '../../src/lib/tracking-links.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { api, createCampaign, drain } from '../engine/fixtures.ts';
import { parseMessage, startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { txSetup } from '../emails/fixtures.ts';
import { eventually, startReceiver, type Receiver } from '../webhooks/receiver.ts';

const config = testConfig({ allowedPrivateTargets: ['127.0.0.1'], webhookRetryDelays: [1, 1], webhookTimeoutMs: 2_000, retryJitter: 0 });

type Hit = { table: string; column: string; rows: number };

/** Every column of every table (all schemas but the system's) whose text form contains `needle`, case-insensitive. */
async function whereIs(t: TestApp, needle: string): Promise<Hit[]> {
  const { rows: columns } = await sql<{ table_schema: string; table_name: string; column_name: string }>`
    SELECT c.table_schema, c.table_name, c.column_name
      FROM information_schema.columns c
      JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
     WHERE t.table_type = 'BASE TABLE' AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
       AND c.table_schema NOT LIKE 'pg_toast%'`.execute(t.database.db);
  assert.ok(columns.length > 100, `the catalog lists the schema (${columns.length} columns)`);
  const hits: Hit[] = [];
  const pattern = `%${needle.toLowerCase().replace(/[\\%_]/g, '\\$&')}%`;
  for (const c of columns) {
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM ${sql.table(`${c.table_schema}.${c.table_name}`)}
       WHERE lower(${sql.ref(c.column_name)}::text) LIKE ${pattern}`.execute(t.database.db);
    if (rows[0]!.n > 0) hits.push({ table: `${c.table_schema}.${c.table_name}`, column: c.column_name, rows: rows[0]!.n });
  }
  return hits;
}

describe('erasing a contact', () => {
  let t: TestApp;
  let sink: CaptureSink;
  let receiver: Receiver;
  let dispatcher: WebhookDispatcher;
  before(async () => {
    t = await buildTestApp({ config });
    sink = await startCaptureSink();
    // The receiver echoes what it got: the delivery log then holds the address in its response body too.
    receiver = await startReceiver((r, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(r.raw);
    });
    dispatcher = new WebhookDispatcher({ db: t.database.db, pool: t.database.pool, config, log: pino({ level: 'silent' }) });
    await dispatcher.start();
  });
  after(async () => {
    await dispatcher.stop();
    closeTransports();
    await receiver.close();
    await sink.close();
    await t.close();
  });

  const call = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1${url}`, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload: payload as object }) });

  test('after DELETE no table holds the address or the name; counts stay; the address stays suppressed', async () => {
    const address = 'erin.q7x+news@erase-me.example';
    const name = 'Erinzqv';
    const s = await txSetup(t, sink.port, {
      subject: 'Order {{ order_id }}',
      content: '<html><body><p>Hi {{ contact.first_name }} {{ variables.note }}</p><a href="https://shop.example/o?who={{ contact.email }}">order</a></body></html>',
    });
    const a = api(t, s.key);
    const hook = await call(s.key, 'POST', '/webhooks', {
      url: receiver.url,
      events: ['email.contact.saved', 'email.contact.unsubscribed', 'email.lead.created', 'email.sent', 'email.opened', 'email.clicked'],
    });
    assert.equal(hook.statusCode, 201, hook.body);
    await createCampaign(a, {
      name: 'Welcome', template_ids: [s.templateId], mail_account_ids: [s.accountId], event_triggered_send: { contact_cooldown_interval: 0 },
    });

    // The address along every path that stores it: a contact, a campaign
    // e-mail, an ingested lead with a key naming it, a transactional e-mail
    // (idempotency key, name, variables, subject), an open, an unsubscribe, a
    // message still queued, an import error quoting it.
    const up = await s.c.post('/email/contacts/upsert', {
      email: address.toUpperCase(), first_name: name, last_name: 'Quux', custom_str_1: `note about ${address}`, tags: ['vip'],
    });
    assert.equal(up.statusCode, 200, up.body);
    const contactId: string = up.json().contact.id;
    const keep = await s.c.post('/email/contacts/upsert', { email: 'keep.me@erase-me.example', first_name: 'Kept' });
    assert.equal(keep.statusCode, 200, keep.body);
    const lead = await s.c.post('/email/events', {
      event_name: 'lead.created', email: address, idempotency_key: `lead-${address}`, payload: { source: 'landing', who: address, name },
    });
    assert.equal(lead.statusCode, 202, lead.body);
    const submit = await s.c.post('/email/emails/submit', {
      template_id: s.templateId, mail_account_id: s.accountId, to_email: address, to_name: `${name} Quux`,
      variables: { order_id: address, note: name }, track_opens: true, track_clicks: true, idempotency_key: `receipt-${address}`,
    });
    assert.equal(submit.statusCode, 202, submit.body);
    await drain(t);
    const toAddress = sink.messages.filter((m) => m.to.includes(address));
    assert.ok(toAddress.length >= 2, 'the campaign e-mail and the receipt were sent');
    const receipt = toAddress.map((m) => parseMessage(m.raw)).find((m) => /\/t\/o\//.test(m.html))!;
    const pixel = /https?:\/\/[^"]*(\/t\/o\/[^"]+\.gif)/.exec(receipt.html)![1]!;
    const open = await t.app.inject({ method: 'GET', url: pixel, headers: { 'user-agent': `Mozilla/5.0 (${name})` } });
    assert.equal(open.statusCode, 200);
    const unsub = await s.c.post('/email/contacts/unsubscribe', { email: address, reason: `asked by ${name}` });
    assert.equal(unsub.statusCode, 200, unsub.body);
    await t.database.db.insertInto('contact_imports').values({
      team_id: s.teamId, status: 'failed', file_name: 'list.csv', file_path: '/nonexistent', bytes: 10, rows_estimate: 1,
      error: `line 2: ${address} is listed twice`,
    }).execute();
    await drain(t, { config });
    const { rows: [sentBefore] } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM email_send_log WHERE team_id = ${s.teamId} AND email = ${address} AND sent_at IS NOT NULL`.execute(t.database.db);
    assert.ok(sentBefore!.n >= 2, `${sentBefore!.n} messages sent`);
    // One more, still queued when the erasure comes.
    const queued = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: address });
    assert.equal(queued.statusCode, 202, queued.body);
    await eventually(async () => {
      const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE team_id = ${s.teamId} AND status = 'success'`.execute(t.database.db);
      assert.ok(rows[0]!.n >= 5, `${rows[0]!.n} deliveries made`);
    });

    // The check can fail: before the erasure the address is in many places.
    const seen = new Set((await whereIs(t, address)).map((h) => h.table));
    for (const table of ['public.contacts', 'public.email_send_log', 'public.events', 'public.webhook_deliveries', 'public.suppressions', 'public.email_idempotency', 'public.contact_imports']) {
      assert.ok(seen.has(table), `before the erasure ${table} holds the address (found in ${[...seen].join(', ')})`);
    }
    const hitsBefore = await t.database.db.selectFrom('tracking_hits').select('id').where('team_id', '=', s.teamId).execute();
    assert.ok(hitsBefore.length > 0, 'the open was recorded');

    const other = await makeTeam(t.database.db, 'other');
    const gone = await call(other.key, 'DELETE', `/email/contacts/${contactId}`);
    assert.equal(gone.statusCode, 404, "another team's contact is not found");

    const del = await call(s.key, 'DELETE', `/email/contacts/${contactId}`);
    assert.equal(del.statusCode, 200, del.body);
    const erased = del.json().erased;
    assert.equal(erased.contacts, 1);
    assert.equal(erased.messages, sentBefore!.n + 1, 'the sent messages and the queued one');
    assert.ok(erased.events >= 5, `events: ${erased.events}`);
    assert.ok(erased.webhook_deliveries >= 5, `deliveries: ${erased.webhook_deliveries}`);
    assert.ok(erased.tracking_hits >= 1);
    assert.equal(erased.leads, 1);
    assert.equal(erased.suppressions, 1, 'the suppression in clear');
    assert.equal(erased.idempotency_records, 1);
    assert.equal(erased.imports, 1);
    assert.ok(erased.campaign_decisions >= 1);

    for (const needle of [address, name]) {
      const left = await whereIs(t, needle);
      assert.deepEqual(left, [], `no column holds ${needle} after the erasure`);
    }

    // Anonymous counts stay: the messages are there, sent, without a recipient.
    const after = await sql<{ n: number; cancelled: number }>`
      SELECT count(*) FILTER (WHERE sent_at IS NOT NULL)::int AS n, count(*) FILTER (WHERE status = 'cancelled')::int AS cancelled
        FROM email_send_log WHERE team_id = ${s.teamId} AND email = '(erased)'`.execute(t.database.db);
    assert.equal(after.rows[0]!.n, sentBefore!.n, 'sent messages are still counted');
    assert.equal(after.rows[0]!.cancelled, 1, 'the queued message is cancelled, never sent');
    const leadRow = await t.database.db.selectFrom('leads').selectAll().where('team_id', '=', s.teamId).executeTakeFirstOrThrow();
    assert.equal(leadRow.contact_id, null);
    assert.equal(leadRow.source, 'landing', 'the lead is kept for the counts');
    assert.equal((await s.c.get(`/email/contacts/${keep.json().contact.id}`)).statusCode, 200, 'the other contact is untouched');

    // The address is suppressed by its keyed hash only.
    const sup = await t.database.db.selectFrom('suppressions').selectAll().where('team_id', '=', s.teamId).execute();
    assert.deepEqual(sup.map((r) => [r.email, r.reason, r.email_hmac]), [[null, 'erased', emailHmac(config.appSecret!, address)]]);
    const again = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: address });
    assert.equal(again.statusCode, 422, again.body);
    assert.equal(again.json().error.code, 'RECIPIENT_SUPPRESSED');
    const batch = await s.c.post('/email/emails/batch', { emails: [{ template_id: s.templateId, mail_account_id: s.accountId, to_email: address.toUpperCase() }] });
    assert.equal(batch.statusCode, 202, batch.body);
    assert.equal(batch.json().emails[0].status, 'suppressed');

    // Nothing more is sent or delivered about the erased address.
    await drain(t, { config });
    assert.equal(sink.messages.filter((m) => m.to.includes(address)).length, sentBefore!.n, 'the cancelled message was not sent');
    // The team adds the address again: the campaign it triggers is suppressed at send time by the hash.
    const back = await s.c.post('/email/contacts/upsert', { email: address });
    assert.equal(back.statusCode, 200, back.body);
    await drain(t, { config });
    assert.equal(sink.messages.filter((m) => m.to.includes(address)).length, sentBefore!.n, 'nothing is sent to the address again');
    // The campaign decides against the re-added contact: the erased address's hash is a suppression.
    const again2 = await t.database.db.selectFrom('email_send_log').select(['status', 'source', 'last_error']).where('team_id', '=', s.teamId).where('email', '=', address).execute();
    assert.equal(again2.filter((r) => r.source === 'campaign').length, 0, JSON.stringify(again2));
    const readded = await t.database.db.selectFrom('contacts').select('id').where('team_id', '=', s.teamId).where('email', '=', address).executeTakeFirstOrThrow();
    const decisions = await t.database.db.selectFrom('campaign_decisions').select(['decision', 'reason']).where('team_id', '=', s.teamId).where('contact_id', '=', readded.id).execute();
    assert.deepEqual(decisions.map((d) => [d.decision, d.reason]), [['skip', 'suppressed']]);
    const open2 = await t.app.inject({ method: 'GET', url: pixel, headers: { 'user-agent': 'again' } });
    assert.equal(open2.statusCode, 200, 'the pixel still answers');
    assert.equal((await t.database.db.selectFrom('tracking_hits').select('id').where('team_id', '=', s.teamId).execute()).length, 0, 'and records nothing');
  });

  test('erase by address: not a contact, case-insensitive, in one team only; validation', async () => {
    const s = await txSetup(t, sink.port);
    const other = await makeTeam(t.database.db, 'other');
    const address = 'guest.r4@erase-me.example';
    const sub = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: address });
    assert.equal(sub.statusCode, 202, sub.body);
    const theirs = await call(other.key, 'POST', '/email/contacts/upsert', { email: address });
    assert.equal(theirs.statusCode, 200);

    const res = await call(s.key, 'POST', '/email/contacts/erase', { email: ` ${address.toUpperCase()} ` });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().erased.contacts, 0);
    assert.equal(res.json().erased.messages, 1);
    const left = await t.database.db.selectFrom('email_send_log').select(['email', 'status']).where('team_id', '=', s.teamId).execute();
    assert.deepEqual(left, [{ email: '(erased)', status: 'cancelled' }]);
    // The other team's contact with the same address is untouched.
    assert.equal((await call(other.key, 'GET', `/email/contacts/by-email?email=${encodeURIComponent(address)}`)).statusCode, 200);

    // An unsubscribe link naming the address (recipient-signed, from an old
    // e-mail) confirms without storing the address again.
    const links = new TrackingLinks(config.publicUrl, config.appSecret!);
    const link = new URL(links.recipientUnsubscribeUrl({ teamId: s.teamId, contactId: null, email: address }));
    const page = await t.app.inject({ method: 'GET', url: link.pathname });
    assert.equal(page.statusCode, 200);
    const post = await t.app.inject({ method: 'POST', url: link.pathname, payload: 'List-Unsubscribe=One-Click', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    assert.equal(post.statusCode, 200, post.body);
    assert.equal((await t.database.db.selectFrom('contacts').select('id').where('team_id', '=', s.teamId).execute()).length, 0, 'no contact re-created');
    assert.equal((await t.database.db.selectFrom('suppressions').select('id').where('team_id', '=', s.teamId).where('email', 'is not', null).execute()).length, 0);

    // Again: nothing left, still 200 (idempotent), one hashed suppression.
    const twice = await call(s.key, 'POST', '/email/contacts/erase', { email: address });
    assert.equal(twice.statusCode, 200);
    assert.ok(Object.values(twice.json().erased as Record<string, number>).every((v) => v === 0), twice.body);
    const sup = await t.database.db.selectFrom('suppressions').select(['reason']).where('team_id', '=', s.teamId).execute();
    assert.deepEqual(sup, [{ reason: 'erased' }]);

    for (const body of [{}, { email: 'not an address' }, { email: address, extra: 1 }]) {
      const bad = await call(s.key, 'POST', '/email/contacts/erase', body);
      assert.equal(bad.statusCode, 422, bad.body);
      assert.equal(bad.json().error.code, 'VALIDATION_FAILED');
    }
    assert.equal((await call(s.key, 'DELETE', '/email/contacts/not-a-uuid')).statusCode, 404);
    assert.equal((await call(s.key, 'DELETE', '/email/contacts/0190a5b0-0000-7000-8000-000000000000')).statusCode, 404);
    assert.equal((await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/erase', payload: { email: address } })).statusCode, 401);
  });

  test('over a real socket (the erase raises the socket idle timeout while it runs)', async () => {
    const s = await txSetup(t, sink.port);
    const address = await t.app.listen({ port: 0, host: '127.0.0.1' });
    const res = await fetch(`${address}/public/v1/email/contacts/erase`, {
      method: 'POST', headers: { 'x-api-key': s.key, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'sock@erase-me.example' }),
    });
    assert.equal(res.status, 200, await res.text());
  });
});
