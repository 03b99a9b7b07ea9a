import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closeTransports } from '../../src/mail/send.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { buildTestApp, listeningCampaign, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { byText } from '../lib/order.ts';
import { captured } from '../lib/statements.ts';
import { api, contactByEmail, createCampaign, drain, eventsNamed, sendLog, setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';

describe('event ingestion', () => {
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

  const count = async (sql: string, params: unknown[]) => Number((await t.database.pool.query(sql, params)).rows[0].n);

  test('202 {ok, event_id}; GET returns the stored event', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listeningCampaign(t.database.db, teamId);
    const a = api(t, key);
    const res = await a.post('/email/events', {
      event_name: 'contact.saved', email: ' New@Example.com ', occurred_at: '2030-01-02T03:04:05.678Z', payload: { plan: 'pro' },
    });
    assert.equal(res.statusCode, 202, res.body);
    const body = res.json();
    assert.deepEqual(Object.keys(body).sort(), ['event_id', 'ok']);
    assert.equal(body.ok, true);
    const got = await a.get(`/email/events/${body.event_id}`);
    assert.equal(got.statusCode, 200);
    const ev = got.json().event;
    const contact = await contactByEmail(t, teamId, 'new@example.com');
    assert.equal(ev.id, body.event_id);
    assert.equal(ev.event_name, 'contact.saved');
    assert.equal(ev.email, 'new@example.com');
    assert.equal(ev.contact_id, contact.id);
    assert.equal(ev.occurred_at, '2030-01-02T03:04:05.678Z');
    assert.deepEqual(ev.payload, { plan: 'pro' });
    assert.equal(ev.event_payload.contact_id, contact.id);
    assert.equal(ev.processed_at, null);
    await drain(t);
    assert.match((await a.get(`/email/events/${body.event_id}`)).json().event.processed_at, /Z$/);
  });

  /** The texts of the statements `fn` sends, whitespace collapsed. */
  const statements = async (fn: () => Promise<unknown>) => (await captured(/./, fn)).map((s) => s.text.replace(/\s+/g, ' ').trim());

  test('a contact.saved writes its event row once, complete, with or without a key; a repeated key writes nothing', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listeningCampaign(t.database.db, teamId);
    const a = api(t, key);
    const writes = (texts: string[]) => texts.filter((x) => /^(\/\* prepared \*\/ )?(INSERT INTO|UPDATE) events\b/i.test(x)).map((x) => x.replace(/^\/\* prepared \*\/ /, '').split(' ').slice(0, 3).join(' '));
    let id = '';
    const plain = await statements(async () => {
      const res = await a.post('/email/events', { event_name: 'contact.saved', email: 'once@example.com', payload: { n: 1 } });
      assert.equal(res.statusCode, 202, res.body);
      id = res.json().event_id;
    });
    assert.deepEqual(writes(plain), ['INSERT INTO events'], plain.join('\n'));
    const contact = await contactByEmail(t, teamId, 'once@example.com');
    const { rows } = await t.database.pool.query('SELECT contact_id, payload, input, processed_at FROM events WHERE id = $1', [id]);
    assert.equal(rows[0].contact_id, contact.id);
    assert.equal(rows[0].payload.contact_id, contact.id);
    assert.equal(rows[0].payload.email, 'once@example.com');
    assert.deepEqual(rows[0].input, { n: 1 });
    assert.equal(rows[0].processed_at, null);

    // With a key, the row is written once too, claiming its key in the same
    // INSERT; a repeat's INSERT finds the key taken and its transaction rolls
    // back everything it did (here: the contact it made for another address).
    const keyed = await statements(async () => {
      const first = await a.post('/email/events', { event_name: 'contact.saved', email: 'once@example.com', idempotency_key: 'saved-1' });
      const again = await a.post('/email/events', { event_name: 'contact.saved', email: 'other@example.com', idempotency_key: 'saved-1' });
      assert.equal(again.statusCode, 202, again.body);
      assert.equal(again.json().event_id, first.json().event_id);
    });
    assert.deepEqual(writes(keyed), ['INSERT INTO events', 'INSERT INTO events'], keyed.join('\n'));
    assert.equal(await count(`SELECT count(*) AS n FROM events WHERE team_id = $1 AND name = 'contact.saved'`, [teamId]), 2);
    assert.equal(await count(`SELECT count(*) AS n FROM events WHERE team_id = $1 AND idempotency_key = 'saved-1'`, [teamId]), 1);
    assert.equal(await count(`SELECT count(*) AS n FROM contacts WHERE team_id = $1 AND email = 'other@example.com'`, [teamId]), 0);
  });

  test('an event no campaign of the team is triggered by and no webhook subscribes to is processed at once, with no job', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    await listeningCampaign(t.database.db, teamId, ['sale.created']);
    const jobs = async () => count(`SELECT count(*) AS n FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
                                     WHERE k.identifier = 'process_events'`, []);
    const before = await jobs();
    const state = async (id: string) => (await t.database.pool.query(
      'SELECT processed_at IS NOT NULL AS processed, decided_at IS NOT NULL AS decided FROM events WHERE id = $1', [id])).rows[0];
    const ids: string[] = [];
    for (const body of [
      { event_name: 'contact.saved', email: 'quiet@example.com' }, // the key-less path
      { event_name: 'contact.saved', email: 'quiet@example.com', idempotency_key: 'q-1' },
      { event_name: 'lead.created', email: 'quiet@example.com' },
    ]) {
      const res = await a.post('/email/events', body);
      assert.equal(res.statusCode, 202, res.body);
      ids.push(res.json().event_id);
      assert.match((await a.get(`/email/events/${res.json().event_id}`)).json().event.processed_at, /Z$/, body.event_name);
    }
    for (const id of ids) assert.deepEqual(await state(id), { processed: true, decided: true });
    assert.equal(await jobs(), before, 'no process_events job');
    // A trigger a campaign of the team lists: left to the decider loop, with no job either.
    const sale = await a.post('/email/events', { event_name: 'sale.created', email: 'quiet@example.com' });
    assert.deepEqual(await state(sale.json().event_id), { processed: false, decided: false });
    assert.equal(await jobs(), before, 'no process_events job: the decider loop takes it');
    await drain(t);
    assert.deepEqual(await state(sale.json().event_id), { processed: true, decided: true });
  });

  test('a lead or sale without a key writes its event row once, complete, with its row; created_at is the event time as JavaScript writes it', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    await listeningCampaign(t.database.db, teamId, ['lead.created', 'sale.created']);
    const eventWrites = (texts: string[]) => texts.filter((x) => /\b(INSERT INTO|UPDATE) events\b/i.test(x));
    for (const name of ['lead.created', 'sale.created'] as const) {
      let id = '';
      const texts = await statements(async () => {
        const res = await a.post('/email/events', { event_name: name, email: 'conv@example.com', payload: { source: 'ad', amount: 12.5, currency: 'usd' } });
        assert.equal(res.statusCode, 202, res.body);
        id = res.json().event_id;
      });
      const writes = eventWrites(texts);
      assert.equal(writes.length, name === 'lead.created' ? 2 : 1, writes.join('\n')); // the first lead also creates the contact (contact.saved)
      assert.ok(writes.every((w) => !/\bUPDATE events\b/i.test(w)), writes.join('\n'));
      const { rows: [ev] } = await t.database.pool.query('SELECT payload, occurred_at, processed_at, decided_at FROM events WHERE id = $1', [id]);
      const table = name === 'lead.created' ? 'leads' : 'sales';
      const { rows: [row] } = await t.database.pool.query(`SELECT id, created_at FROM ${table} WHERE event_id = $1`, [id]);
      assert.equal(ev.payload[name === 'lead.created' ? 'lead_id' : 'sale_id'], row.id);
      assert.equal(ev.payload.created_at, (ev.occurred_at as Date).toISOString());
      assert.equal((row.created_at as Date).getTime(), (ev.occurred_at as Date).getTime());
      assert.equal(ev.processed_at, null, 'a campaign listens: left to its job');
      assert.equal(ev.decided_at, null);
    }
    // Microseconds truncate as Date#toISOString() of the stored time does; the
    // years where to_char and JavaScript write a time differently (UTC year 0, 10000) are written as JavaScript would.
    for (const occurred_at of ['2030-01-01T00:00:00.123999Z', '9999-12-31T23:59:59-15:59', '0001-01-01T00:00:00+15:59']) {
      const res = await a.post('/email/events', { event_name: 'lead.created', email: 'conv@example.com', occurred_at });
      assert.equal(res.statusCode, 202, `${occurred_at}: ${res.body}`);
      const { rows: [ev] } = await t.database.pool.query('SELECT payload, occurred_at FROM events WHERE id = $1', [res.json().event_id]);
      assert.equal(ev.payload.created_at, (ev.occurred_at as Date).toISOString(), occurred_at);
    }
    const contact = await contactByEmail(t, teamId, 'conv@example.com');
    assert.equal(contact.leads_count, 4);
    assert.equal(contact.sales_count, 1);
  });

  test('a lead or sale has the same payload and row with a key as without one', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    // The team's campaign, for the attribution (its trigger also gives the leads their jobs).
    const { rows: [{ id: campaignId }] } = await t.database.pool.query(
      `INSERT INTO campaigns (team_id, name, draft_data, trigger_events) VALUES ($1, 'x', '{}', '{lead.created}') RETURNING id`, [teamId]);
    const occurred_at = '2031-05-06T07:08:09.123456+02:00';
    for (const name of ['lead.created', 'sale.created'] as const) {
      const payload = { source: 'Ads', campaign_id: String(campaignId).toUpperCase(), amount: 10.05, currency: 'chf' };
      const ids: string[] = [];
      for (const idempotency_key of [undefined, `${name}-k`]) {
        const res = await a.post('/email/events', { event_name: name, email: 'same@example.com', occurred_at, idempotency_key, payload });
        assert.equal(res.statusCode, 202, res.body);
        ids.push(res.json().event_id);
      }
      const table = name === 'lead.created' ? 'leads' : 'sales';
      const idKey = name === 'lead.created' ? 'lead_id' : 'sale_id';
      const { rows } = await t.database.pool.query(
        `SELECT e.payload, r.id AS row_id, to_jsonb(r) - 'id' - 'event_id' AS row,
                r.created_at = date_trunc('milliseconds', e.occurred_at) AS row_time_ms
           FROM events e JOIN ${table} r ON r.event_id = e.id WHERE e.id = ANY ($1::uuid[]) ORDER BY e.idempotency_key NULLS FIRST`, [ids]);
      assert.equal(rows.length, 2, name);
      const [plain, keyed] = rows;
      assert.equal(plain.payload[idKey], plain.row_id);
      assert.equal(keyed.payload[idKey], keyed.row_id);
      const strip = (x: Record<string, unknown>) => Object.fromEntries(Object.entries(x).filter(([k]) => k !== idKey));
      assert.deepEqual(strip(plain.payload), strip(keyed.payload), name);
      assert.equal(plain.payload.created_at, '2031-05-06T05:08:09.123Z');
      assert.equal(plain.payload.campaign_id, String(campaignId).toLowerCase());
      if (name === 'sale.created') assert.deepEqual([plain.payload.amount, plain.payload.currency], [10.05, 'CHF']);
      assert.deepEqual(plain.row, keyed.row, name);
      assert.ok(plain.row_time_ms && keyed.row_time_ms, `${name}: the rows' created_at is the event's time in milliseconds`);
    }
  });

  test('a keyed lead or sale is written once; a repeat for another, new address keeps nothing: no contact, no contact.saved, no job', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    await listeningCampaign(t.database.db, teamId, ['lead.created', 'sale.created', 'contact.saved']);
    const jobs = async () => count(`SELECT count(*) AS n FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
                                     WHERE k.identifier = 'process_events'`, []);
    for (const name of ['lead.created', 'sale.created'] as const) {
      const k = `${name}-once`;
      let first = '';
      const texts = await statements(async () => {
        const res = await a.post('/email/events', { event_name: name, email: 'keyed@example.com', idempotency_key: k, payload: { amount: 3 } });
        assert.equal(res.statusCode, 202, res.body);
        first = res.json().event_id;
      });
      assert.ok(texts.every((x) => !/\bUPDATE events\b/i.test(x)), texts.join('\n'));
      const before = { jobs: await jobs(), events: await count('SELECT count(*) AS n FROM events WHERE team_id = $1', [teamId]) };
      const again = await a.post('/email/events', { event_name: name, email: `new-${name}@example.com`, idempotency_key: k, payload: { amount: 4 } });
      assert.equal(again.statusCode, 202, again.body);
      assert.deepEqual(again.json(), { ok: true, event_id: first });
      assert.equal(await count('SELECT count(*) AS n FROM contacts WHERE team_id = $1 AND email = $2', [teamId, `new-${name}@example.com`]), 0);
      assert.equal(await count('SELECT count(*) AS n FROM events WHERE team_id = $1', [teamId]), before.events, 'no event, no contact.saved');
      assert.equal(await jobs(), before.jobs, 'no job');
    }
    const c = await contactByEmail(t, teamId, 'keyed@example.com');
    assert.deepEqual([c.leads_count, c.sales_count], [1, 1]);
  });

  test('one key sent at once through both paths (an unsubscribe, a lead) for one new address: one event, one contact, no error', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    for (let round = 0; round < 5; round++) {
      const email = `race${round}@example.com`;
      const k = `race-${round}`;
      // The unsubscribe claims its row first and fills it in after, the
      // lead the single write: both take the contact before the key.
      const answers = await Promise.all([
        a.post('/email/events', { event_name: 'contact.unsubscribed', email, idempotency_key: k }),
        a.post('/email/events', { event_name: 'lead.created', email, idempotency_key: k }),
        a.post('/email/events', { event_name: 'contact.unsubscribed', email, idempotency_key: k }),
        a.post('/email/events', { event_name: 'lead.created', email, idempotency_key: k }),
      ]);
      assert.ok(answers.every((r) => r.statusCode === 202), answers.map((r) => `${r.statusCode} ${r.body}`).join('\n'));
      assert.equal(new Set(answers.map((r) => r.json().event_id)).size, 1);
      assert.equal(await count('SELECT count(*) AS n FROM events WHERE team_id = $1 AND idempotency_key = $2', [teamId, k]), 1);
      assert.equal(await count('SELECT count(*) AS n FROM contacts WHERE team_id = $1 AND email = $2', [teamId, email]), 1);
    }
  });

  test('the same idempotency_key returns the first id and does nothing more, also when sent concurrently', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    const body = { event_name: 'lead.created', email: 'idem@example.com', idempotency_key: 'k-1' };
    const first = await a.post('/email/events', body);
    const again = await a.post('/email/events', { ...body, payload: { source: 'other' } });
    assert.equal(again.statusCode, 202);
    assert.equal(again.json().event_id, first.json().event_id);
    const results = await Promise.all(Array.from({ length: 8 }, () => a.post('/email/events', { ...body, idempotency_key: 'k-2' })));
    assert.ok(results.every((r) => r.statusCode === 202), results.map((r) => r.body).join());
    assert.equal(new Set(results.map((r) => r.json().event_id)).size, 1);
    assert.equal(await count('SELECT count(*) AS n FROM leads WHERE team_id = $1', [teamId]), 2);
    assert.equal((await contactByEmail(t, teamId, 'idem@example.com')).leads_count, 2);
    assert.equal(await count(`SELECT count(*) AS n FROM events WHERE team_id = $1 AND name = 'lead.created'`, [teamId]), 2);
    // Keys are per team.
    const other = await makeTeam(t.database.db);
    const theirs = await api(t, other.key).post('/email/events', body);
    assert.notEqual(theirs.json().event_id, first.json().event_id);
  });

  test('lead.created: creates the contact, counts, emits contact.saved and lead.created with the 6.3 payload', async () => {
    const s = await setup(t, sink.port);
    const c = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['lead.created'] });
    const res = await s.a.post('/email/events', {
      event_name: 'lead.created', email: 'lead@example.com', occurred_at: '2030-03-01T10:00:00.000Z',
      payload: { source: 'landing', campaign_id: c.id.toUpperCase(), campaign_send_id: c.sendId },
    });
    assert.equal(res.statusCode, 202, res.body);
    const second = await s.a.post('/email/events', { event_name: 'lead.created', email: 'lead@example.com', occurred_at: '2030-02-01T10:00:00.000Z' });
    const contact = await contactByEmail(t, s.teamId, 'lead@example.com');
    assert.equal(contact.leads_count, 2);
    assert.equal((contact.first_lead_at as Date).toISOString(), '2030-02-01T10:00:00.000Z');
    assert.equal((contact.last_lead_at as Date).toISOString(), '2030-03-01T10:00:00.000Z');
    assert.equal((await eventsNamed(t, s.teamId, 'contact.saved')).length, 1, 'created once');
    const [lead] = await eventsNamed(t, s.teamId, 'lead.created');
    const row = await t.database.db.selectFrom('leads').selectAll().where('event_id', '=', lead.id).executeTakeFirstOrThrow();
    assert.deepEqual(lead.payload, {
      lead_id: row.id, contact_id: contact.id, email: 'lead@example.com', created_at: '2030-03-01T10:00:00.000Z',
      source: 'landing', campaign_id: c.id, campaign_send_id: c.sendId,
    });
    await drain(t);
    // Two leads for one contact: the campaign sends once, and the other is held
    // back by the cooldown (which one comes first is up to the worker).
    const decided = [];
    for (const id of [res.json().event_id, second.json().event_id]) {
      decided.push(...(await s.a.get(`/email/events/${id}/decisions`)).json().decisions.map((d: any) => `${d.decision}:${d.reason ?? ''}`));
    }
    assert.deepEqual(decided.sort(byText), ['send:', 'skip:cooldown']);
  });

  test('sale.created: counters and payload with amount and currency', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    await a.post('/email/contacts/upsert', { email: 'buyer@example.com' });
    const res = await a.post('/email/events', { event_name: 'sale.created', email: 'buyer@example.com', payload: { amount: 49.9, currency: 'eur', source: 'shop' } });
    assert.equal(res.statusCode, 202, res.body);
    const contact = await contactByEmail(t, teamId, 'buyer@example.com');
    assert.equal(contact.sales_count, 1);
    assert.ok(contact.first_sale_at && contact.last_sale_at);
    const [sale] = await eventsNamed(t, teamId, 'sale.created');
    const row = await t.database.db.selectFrom('sales').selectAll().where('event_id', '=', sale.id).executeTakeFirstOrThrow();
    assert.equal(row.amount, '49.9');
    assert.deepEqual(sale.payload, {
      sale_id: row.id, contact_id: contact.id, email: 'buyer@example.com', created_at: (sale.occurred_at as Date).toISOString(),
      amount: 49.9, currency: 'EUR', source: 'shop', campaign_id: null, campaign_send_id: null,
    });
    assert.equal((await eventsNamed(t, teamId, 'contact.saved')).length, 1, 'the upsert only; the sale created no contact');
    // Without an e-mail address: recorded, no contact.
    const anon = await a.post('/email/events', { event_name: 'sale.created', idempotency_key: 'order-1', payload: { amount: 5 } });
    assert.equal(anon.statusCode, 202);
    assert.equal((await a.get(`/email/events/${anon.json().event_id}`)).json().event.contact_id, null);
  });

  test('contact.unsubscribed: status, reason, listed, one email.contact.unsubscribed event; later triggers skip', async () => {
    const s = await setup(t, sink.port);
    // Never delivered: the drain below runs the jobs, not the webhook dispatcher.
    await createWebhook(t.database.db, webhookSecretBox(testConfig().appSecret), s.teamId, { url: 'http://127.0.0.1:9/hook', events: ['email.contact.unsubscribed'] });
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['lead.created'] });
    await s.a.post('/email/contacts/upsert', { email: 'bye@example.com' });
    const res = await s.a.post('/email/events', { event_name: 'contact.unsubscribed', email: 'bye@example.com', payload: { reason: 'too many' } });
    assert.equal(res.statusCode, 202, res.body);
    await s.a.post('/email/events', { event_name: 'contact.unsubscribed', email: 'bye@example.com' });
    const contact = await contactByEmail(t, s.teamId, 'bye@example.com');
    assert.equal(contact.status, 'unsubscribed');
    assert.equal(contact.unsubscribed_reason, 'too many');
    const events = await eventsNamed(t, s.teamId, 'contact.unsubscribed');
    assert.equal(events.length, 2, 'both recorded');
    assert.equal(events.filter((e) => e.processed_at === null).length, 1, 'only the change is processed (one webhook)');
    assert.equal(events[0].payload.unsubscribe_method, 'api');
    assert.equal(events[0].payload.unsubscribe_reason, 'too many');
    const list = await s.a.get('/email/contacts/unsubscribes');
    assert.deepEqual(list.json().contacts.map((c: any) => c.email), ['bye@example.com']);
    const lead = await s.a.post('/email/events', { event_name: 'lead.created', email: 'bye@example.com' });
    await drain(t);
    assert.deepEqual((await s.a.get(`/email/events/${lead.json().event_id}/decisions`)).json().decisions.map((d: any) => d.reason), ['unsubscribed']);
    assert.equal((await sendLog(t, s.teamId)).length, 0);
  });

  test('validation errors are 422 with the error envelope; nothing is written', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    const other = await makeTeam(t.database.db);
    const otherCampaign = (await t.database.pool.query(
      `INSERT INTO campaigns (team_id, name, draft_data, trigger_events) VALUES ($1, 'x', '{}', '{}') RETURNING id`, [other.teamId],
    )).rows[0].id;
    const cases: [object, string][] = [
      [{ event_name: 'email.sent', email: 'a@example.com' }, 'event_name'],
      [{ event_name: 'lead.created' }, 'email'],
      [{ event_name: 'contact.saved', idempotency_key: 'k' }, 'email'],
      [{ event_name: 'lead.created', email: 'not-an-address' }, 'email'],
      [{ event_name: 'lead.created', email: 'a@example.com', occurred_at: 'yesterday' }, 'occurred_at'],
      [{ event_name: 'lead.created', email: 'a@example.com', occurred_at: '2030-02-30T10:00:00Z' }, 'occurred_at'],
      [{ event_name: 'lead.created', email: 'a@example.com', payload: [] }, 'payload'],
      [{ event_name: 'lead.created', email: 'a@example.com', extra: 1 }, 'extra'],
      [{ event_name: 'lead.created', email: 'a@example.com', idempotency_key: '' }, 'idempotency_key'],
      [{ event_name: 'sale.created', email: 'a@example.com', payload: { amount: '12' } }, 'payload.amount'],
      [{ event_name: 'sale.created', email: 'a@example.com', payload: { currency: 'euro' } }, 'payload.currency'],
      [{ event_name: 'lead.created', email: 'a@example.com', payload: { campaign_id: 'x' } }, 'payload.campaign_id'],
      [{ event_name: 'lead.created', email: 'a@example.com', payload: { campaign_id: otherCampaign } }, 'payload.campaign_id'],
      [{ event_name: 'lead.created', email: 'a@example.com', payload: { note: 'a\u0000b' } }, '(body)'],
    ];
    for (const [body, field] of cases) {
      const res = await a.post('/email/events', body);
      assert.equal(res.statusCode, 422, `${JSON.stringify(body)}: ${res.body}`);
      const err = res.json();
      assert.equal(err.ok, false);
      assert.equal(err.error.code, 'VALIDATION_FAILED');
      assert.ok(err.error.details.some((d: any) => d.field === field), `${JSON.stringify(body)} names ${field}: ${res.body}`);
    }
    const malformed = await t.app.inject({
      method: 'POST', url: '/public/v1/email/events', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload: '{"event_name":',
    });
    assert.equal(malformed.statusCode, 422);
    assert.equal(await count('SELECT count(*) AS n FROM events WHERE team_id = $1', [teamId]), 0);
    assert.equal(await count('SELECT count(*) AS n FROM contacts WHERE team_id = $1', [teamId]), 0);
  });

  // Found by the contract fuzz: a free-form payload 10,000 levels deep was a 500.
  test('a payload nested 10,000 levels deep is 422 and writes nothing', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const depth = 10_000;
    const payload = `{"event_name":"contact.saved","email":"deep@example.com","payload":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`;
    const res = await t.app.inject({ method: 'POST', url: '/public/v1/email/events', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload });
    assert.equal(res.statusCode, 422, res.body);
    assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    assert.equal(await count('SELECT count(*) AS n FROM events WHERE team_id = $1', [teamId]), 0);
  });

  // Found by the contract fuzz: ajv's date-time took these, PostgreSQL did not (a 500).
  test('occurred_at in year 0000 or with an offset past 15:59 is 422 naming it; the extremes PostgreSQL takes are 202', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    for (const occurred_at of ['0000-01-01T00:00:00Z', '2024-01-01T00:00:00+23:59', '1969-12-31T23:59:59-16:00']) {
      const res = await a.post('/email/events', { event_name: 'contact.saved', email: 'when@example.com', occurred_at });
      assert.equal(res.statusCode, 422, `${occurred_at}: ${res.body}`);
      assert.equal(res.json().error.details[0].field, 'occurred_at');
    }
    assert.equal(await count('SELECT count(*) AS n FROM events WHERE team_id = $1', [teamId]), 0);
    for (const occurred_at of ['0001-01-01T00:00:00Z', '9999-12-31T23:59:59-15:59', '2024-12-31T23:59:60Z']) {
      const res = await a.post('/email/events', { event_name: 'contact.saved', email: 'when@example.com', occurred_at });
      assert.equal(res.statusCode, 202, `${occurred_at}: ${res.body}`);
    }
  });

  test('GET an event shows occurred_at as JavaScript writes it in every year, UTC years 0 and 10000 included', async () => {
    const { key } = await makeTeam(t.database.db);
    const a = api(t, key);
    // UTC 0000-12-31 (1 BC, which to_char spelled 0001: a year off) and 10000-01-01 (to_char: 10000-…, not ISO 8601).
    for (const occurred_at of ['0001-01-01T00:00:00+15:59', '9999-12-31T23:59:59-15:59', '2030-01-01T00:00:00.123999Z']) {
      const res = await a.post('/email/events', { event_name: 'contact.saved', email: 'year@example.com', occurred_at });
      assert.equal(res.statusCode, 202, `${occurred_at}: ${res.body}`);
      const got = (await a.get(`/email/events/${res.json().event_id}`)).json().event;
      assert.equal(got.occurred_at, new Date(occurred_at).toISOString(), occurred_at);
    }
  });

  test("team isolation: another team's event ids are 404; malformed ids are 404", async () => {
    const mine = await makeTeam(t.database.db);
    const theirs = await makeTeam(t.database.db);
    const ev = (await api(t, theirs.key).post('/email/events', { event_name: 'contact.saved', email: 'x@example.com' })).json().event_id;
    const a = api(t, mine.key);
    for (const url of [`/email/events/${ev}`, `/email/events/${ev}/decisions`, '/email/events/nope', '/email/events/nope/decisions']) {
      const res = await a.get(url);
      assert.equal(res.statusCode, 404, url);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
    assert.equal((await t.app.inject({ url: `/public/v1/email/events/${ev}` })).statusCode, 401);
  });
});
