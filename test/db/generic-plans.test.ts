// A prepared statement saves its planning only when PostgreSQL switches it to a
// generic plan, which it does after five executions if that plan is estimated
// no costlier than a custom one. Keyed by `= ANY ($1::uuid[])` and called with
// one id, the custom plan sees the array's length (the generic one assumes ten)
// and always wins, so the statement is planned again at every execution. The
// process_events job, one per ingested event, names a
// single event as a scalar (src/db/ids.ts) so that its two statements
// are planned once per connection (keyed by a one-element array instead, both
// made 12 custom plans of 12 here). Every statement runs on one connection,
// whose pg_prepared_statements counts the plans it made.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { createDb, createPool, type Db } from '../../src/db/pool.ts';
import { processEventsTask } from '../../src/events/process.ts';
import { decideBatch, loadEventCandidates, waitingTeams } from '../../src/campaigns/engine.ts';
import { decideOptions } from '../../src/tasks.ts';
import { emit } from '../../src/events/emit.ts';
import { claimDueDeliveries, enqueueDeliveries, recordAttempts } from '../../src/webhooks/deliveries.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { recordHit, type HitInput } from '../../src/mail/tracking.ts';
import { insertEmails, loadRefs } from '../../src/mail/emails-queries.ts';
import { suppressedForAllMail } from '../../src/contacts/suppressions.ts';
import { ingestEvent } from '../../src/ingest/ingest.ts';
import { BROWSER_UA, insertSend } from '../tracking/fixtures.ts';
import { buildTestApp, createTestDatabase, listeningCampaign, makeTeam, testConfig, type TestDatabase } from '../helpers.ts';
import { createCampaign, setup } from '../engine/fixtures.ts';

let database: TestDatabase;
let one: { pool: ReturnType<typeof createPool>; db: Db };
before(async () => {
  database = await createTestDatabase();
  const pool = createPool(database.url, 1);
  one = { pool, db: createDb(pool) };
  // A table of some size, analysed: on a near-empty one every plan costs the
  // same and even the array form goes generic.
  const other = await makeTeam(database.db, 'other');
  await sql`
    INSERT INTO events (team_id, name, payload, processed_at)
    SELECT ${other.teamId}::uuid, 'contact.deleted', '{}'::jsonb, now() FROM generate_series(1, 20000)`.execute(database.db);
  await sql`ANALYZE events`.execute(database.db);
});
after(async () => {
  await one.db.destroy();
  await database.drop();
});

type PlanCount = { statement: string; generic_plans: number; custom_plans: number };

async function planCounts(pattern: string): Promise<PlanCount[]> {
  const { rows } = await sql<PlanCount>`
    SELECT statement, generic_plans::int, custom_plans::int FROM pg_prepared_statements
     WHERE statement LIKE ${pattern} ORDER BY statement`.execute(one.db);
  return rows;
}

/**
 * The generic plan of the statement prepared on `one`'s connection under
 * `name` (plan_cache_mode = force_generic_plan, EXPLAIN EXECUTE): a generic
 * plan does not depend on the values, so every parameter is NULL.
 */
async function genericPlan(name: string): Promise<string> {
  const client = await one.pool.connect();
  try {
    await client.query('SET plan_cache_mode = force_generic_plan');
    const { rows: [ps] } = await client.query<{ n: number }>(
      'SELECT cardinality(parameter_types)::int AS n FROM pg_prepared_statements WHERE name = $1', [name]);
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE "${name}" (${Array(ps!.n).fill('NULL').join(', ')})`);
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  } finally {
    await client.query('RESET plan_cache_mode');
    client.release();
  }
}

test('a process_events job of one event runs its prepared statements on generic plans', async () => {
  const { teamId } = await makeTeam(database.db);
  const { rows } = await sql<{ id: string }>`
    INSERT INTO events (team_id, name, payload) SELECT ${teamId}::uuid, 'contact.deleted', '{}'::jsonb FROM generate_series(1, 12)
    RETURNING id`.execute(database.db);
  let handled = 0;
  const task = processEventsTask(one.db, [async (events) => void (handled += events.length)]);
  for (const { id } of rows) await task({ event_ids: [id] }, {} as never);
  assert.equal(handled, 12);
  const { rows: left } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM events WHERE team_id = ${teamId} AND processed_at IS NULL`.execute(database.db);
  assert.equal(left[0]!.n, 0, 'every event marked processed');

  const counts = await planCounts('/* prepared */%FROM events%');
  assert.equal(counts.length, 2, JSON.stringify(counts));
  for (const c of counts) {
    assert.equal(c.generic_plans + c.custom_plans, 12, c.statement);
    // Five custom plans, then the generic one for good.
    assert.ok(c.generic_plans >= 7, `${c.statement}: ${c.generic_plans} generic, ${c.custom_plans} custom`);
  }
});

test('the webhook fan-out of one event is planned once per connection', async () => {
  const { teamId } = await makeTeam(database.db);
  const { rows } = await sql<{ id: string }>`
    INSERT INTO events (team_id, name, payload) SELECT ${teamId}::uuid, 'contact.deleted', '{}'::jsonb FROM generate_series(1, 12)
    RETURNING id`.execute(database.db);
  for (const { id } of rows) await enqueueDeliveries(one.db, [{ id }]);
  const counts = await planCounts('/* prepared */%WITH ev AS%');
  assert.equal(counts.length, 1, JSON.stringify(counts));
  assert.equal(counts[0]!.generic_plans + counts[0]!.custom_plans, 12);
  assert.ok(counts[0]!.generic_plans >= 7, `${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
});

// The decider's candidates (campaigns/engine.ts, loadEventCandidates) for a
// batch of a few events: prepared, the batch a sized recordset. Unnamed and
// keyed by an array, it was planned at every batch (340 µs a call in `bench
// campaigns`' latency run).
test('the decider\'s candidates for a batch of events run on a generic plan from the sixth batch', async () => {
  const { teamId } = await makeTeam(database.db);
  const { rows: contacts } = await sql<{ id: string }>`
    INSERT INTO contacts (team_id, email) SELECT ${teamId}::uuid, 'g' || i || '@example.com' FROM generate_series(1, 36) AS i RETURNING id`.execute(database.db);
  const { rows: campaign } = await sql<{ id: string }>`
    INSERT INTO campaigns (team_id, name, draft_data, trigger_events) VALUES (${teamId}::uuid, 'Welcome', '{}', '{contact.saved}') RETURNING id`.execute(database.db);
  await sql`
    INSERT INTO campaign_sends (team_id, campaign_id, campaign_type, status, send_data)
    VALUES (${teamId}::uuid, ${campaign[0]!.id}::uuid, 'event_triggered', 'active', '{}'::jsonb)`.execute(database.db);
  const { rows: events } = await sql<{ id: string }>`
    INSERT INTO events (team_id, name, contact_id, payload)
    SELECT ${teamId}::uuid, 'contact.saved', c.id, '{}'::jsonb FROM unnest(${contacts.map((c) => c.id)}::uuid[]) AS c (id) RETURNING id`.execute(database.db);
  let found = 0;
  for (let i = 0; i < 12; i++) {
    const batch = events.slice(i * 3, i * 3 + 3).map((e) => e.id);
    const candidates = await loadEventCandidates(one.db, batch);
    assert.deepEqual(candidates.map((c) => c.event_id).sort(), [...batch].sort());
    found += candidates.length;
  }
  assert.equal(found, 36);
  const counts = await planCounts('/* prepared */%AS campaign_send_id%');
  assert.equal(counts.length, 1, JSON.stringify(counts));
  assert.equal(counts[0]!.generic_plans + counts[0]!.custom_plans, 12);
  assert.ok(counts[0]!.generic_plans >= 7, `${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
});

// The decider's batch of waiting events (campaigns/engine.ts) and the event
// insert of emit() (events/emit.ts): prepared, each planned five times on a
// connection and then run on its generic plan, which for the decider walks the
// partial index of undecided events.
test('the decider\'s waiting-events batch and emit()\'s insert run on generic plans from the sixth call', async () => {
  const { teamId } = await makeTeam(database.db);
  await listeningCampaign(database.db, teamId); // or the events are recorded decided, with nothing for the decider
  const { rows: contacts } = await sql<{ id: string }>`
    INSERT INTO contacts (team_id, email) SELECT ${teamId}::uuid, 'w' || i || '@example.com' FROM generate_series(1, 12) AS i RETURNING id`.execute(database.db);
  const opts = decideOptions({ db: one.db, config: testConfig() });
  for (const c of contacts) {
    await one.db.transaction().execute((tx) => emit(tx, [{ teamId, name: 'contact.saved', contactId: c.id, payload: {} }]));
    // As the decider loop does: a batch that takes the event, then one that finds none left.
    assert.equal(await decideBatch(one.db, teamId, () => new Date(), opts), 'decided');
    assert.equal(await decideBatch(one.db, teamId, () => new Date(), opts), 'none');
  }
  const { rows: left } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM events WHERE team_id = ${teamId}::uuid AND decided_at IS NULL`.execute(database.db);
  assert.equal(left[0]!.n, 0, 'every event decided');
  // The batch read runs twice per event here: it takes the event, then finds none left.
  const batchRead = '/* prepared */%SELECT id FROM events%WHERE team_id = $1%FOR NO KEY UPDATE SKIP LOCKED';
  for (const [pattern, calls] of [[batchRead, 24], ['/* prepared */%INSERT INTO events%', 12]] as const) {
    const counts = await planCounts(pattern);
    assert.equal(counts.length, 1, `${pattern}: ${JSON.stringify(counts)}`);
    assert.equal(counts[0]!.generic_plans + counts[0]!.custom_plans, calls, pattern);
    // Five custom plans, then the generic one for good.
    assert.equal(counts[0]!.custom_plans, 5, `${pattern}: ${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
  }
  // The generic plan of the batch read is the partial index of undecided events.
  const { rows: [ps] } = await sql<{ name: string }>`
    SELECT name FROM pg_prepared_statements WHERE statement LIKE ${batchRead}`.execute(one.db);
  const client = await one.pool.connect();
  try {
    await client.query(`SET plan_cache_mode = force_generic_plan`);
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE "${ps!.name}" ('${teamId}')`);
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    assert.match(plan, /events_undecided_idx/, plan);
  } finally {
    await client.query('RESET plan_cache_mode');
    client.release();
  }
});

// The listener check in emit()'s insert (events/emit.ts, listenersSql): in the
// statement's generic plan, as in its custom ones, a team's campaigns are read
// through campaigns_trigger_idx (migration 0037), not all of them.
test('emit()\'s generic plan checks for a listening campaign once, through campaigns_trigger_idx, past the team\'s broadcasts', async () => {
  const { teamId } = await makeTeam(database.db);
  await sql`INSERT INTO campaigns (team_id, name, campaign_type, draft_data, trigger_events)
            SELECT ${teamId}::uuid, 'b' || i, 'broadcast', '{}'::jsonb, '{}'::text[] FROM generate_series(1, 3000) AS i`.execute(database.db);
  await listeningCampaign(database.db, teamId);
  await sql`ANALYZE campaigns`.execute(database.db);
  const { rows: [c] } = await sql<{ id: string }>`
    INSERT INTO contacts (team_id, email) VALUES (${teamId}::uuid, 'plan@example.com') RETURNING id`.execute(database.db);
  for (let i = 0; i < 6; i++) await one.db.transaction().execute((tx) => emit(tx, [{ teamId, name: 'contact.saved', contactId: c!.id, payload: {} }]));
  const { rows: prepared } = await sql<{ name: string }>`
    SELECT name FROM pg_prepared_statements WHERE statement LIKE '/* prepared */%INSERT INTO events%jsonb_to_recordset%listening_campaign%'`.execute(one.db);
  assert.equal(prepared.length, 1, JSON.stringify(prepared));
  const plan = await genericPlan(prepared[0]!.name);
  assert.match(plan, /campaigns_trigger_idx/, plan);
  assert.doesNotMatch(plan, /Seq Scan on campaigns|campaigns_team_idx/, plan);
  // Once per event: the check is used twice (processed_at, decided_at), and
  // a subquery pulled up into the statement copied it into each use.
  assert.equal(plan.match(/campaigns_trigger_idx/g)!.length, 1, plan);
});

// decide() (campaigns/engine.ts) reads, per batch, the day's count of each
// account and the send history of each (campaign, contact) pair: prepared,
// their batches sized recordsets, planned five times on a connection, then
// generic plans that reach the message log and the decisions by their indexes.
test('the decider\'s account count, send history and inserts run on generic plans (the reads through their indexes)', async () => {
  const t = await buildTestApp({ database });
  try {
    const s = await setup(t, 2525);
    const campaign = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const { rows: contacts } = await sql<{ id: string }>`
      INSERT INTO contacts (team_id, email) SELECT ${s.teamId}::uuid, 'h' || i || '@example.com' FROM generate_series(1, 12) AS i RETURNING id`.execute(database.db);
    const opts = decideOptions({ db: one.db, config: testConfig() });
    for (const c of contacts) {
      await one.db.transaction().execute((tx) => emit(tx, [{ teamId: s.teamId, name: 'contact.saved', contactId: c.id, payload: {} }]));
      assert.equal(await decideBatch(one.db, s.teamId, () => new Date(), opts), 'decided');
    }
    const { rows: sends } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM campaign_decisions WHERE team_id = ${s.teamId}::uuid AND decision = 'send'`.execute(database.db);
    assert.equal(sends[0]!.n, 12, 'one send decided per event');
    const statements = { count: '/* prepared */%AS mail_account_id%', history: '/* prepared */%max(d.decided_at) AS last_at%' };
    const inserts = {
      messages: '/* prepared */%INSERT INTO email_send_log (team_id, campaign_id, campaign_send_id, contact_id, event_id%',
      decisions: '/* prepared */%INSERT INTO campaign_decisions%',
      decided: '/* prepared */%UPDATE events SET decided_at = now()%',
    };
    for (const [what, pattern] of Object.entries({ ...statements, ...inserts })) {
      const counts = await planCounts(pattern);
      assert.equal(counts.length, 1, `${what}: ${JSON.stringify(counts)}`);
      // At least the twelve decisions here (the decided mark also runs for other tests' events on this connection).
      assert.ok(counts[0]!.generic_plans + counts[0]!.custom_plans >= 12, what);
      assert.equal(counts[0]!.custom_plans, 5, `${what}: ${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
    }
    // The one connection of `one`, where the statements are prepared.
    const client = await one.pool.connect();
    try {
      await client.query('SET plan_cache_mode = force_generic_plan');
      const generic = async (pattern: string, args: string) => {
        const { rows: [ps] } = await client.query<{ name: string }>(`SELECT name FROM pg_prepared_statements WHERE statement LIKE $1`, [pattern]);
        const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE "${ps!.name}" (${args})`);
        return rows.map((r) => r['QUERY PLAN']).join('\n');
      };
      const count = await generic(statements.count, `'[{"id": "${s.accountId}", "cap": 500}]'`);
      assert.match(count, /email_send_log_account_pending_idx/, count);
      assert.doesNotMatch(count, /Seq Scan on email_send_log/, count);
      const history = await generic(statements.history, `now(), now(), '[{"campaign_id": "${campaign.id}", "contact_id": "${contacts[0]!.id}"}]'`);
      assert.match(history, /campaign_decisions_sends_idx/, history);
    } finally {
      await client.query('RESET plan_cache_mode');
      client.release();
    }
  } finally {
    await t.app.close();
  }
});

// A tracking link's repeat within the hour (mail/tracking.ts): the read that
// decides it and the raw-hit update are prepared, so a replay loop of one link
// (or a newsletter's opens arriving by the thousand) runs both on generic plans
// from the sixth hit. Unnamed, the read cost 645 µs of planning against 407 of
// execution per hit (`npm run bench -- tracking-replay --pg-stats`). The
// update's generic plan keeps its `synchronous_commit` setting a one-time
// filter, evaluated before the row is looked up, as in a custom plan (that the
// setting is read at commit is PostgreSQL's, not checked here: the commit
// reads it before the end of the transaction resets it).
test('a replayed tracking link reads and counts on generic plans, the update\'s asynchronous commit a one-time filter', async () => {
  const { teamId } = await makeTeam(database.db);
  // A message log of some size, analysed, most of it one team's: on a
  // near-empty table the update's generic plan went through the team's index.
  await sql`
    INSERT INTO email_send_log (team_id, email, status, sent_at)
    SELECT ${teamId}::uuid, 'm' || i || '@example.com', 'sent', now() FROM generate_series(1, 20000) AS i`.execute(database.db);
  await sql`ANALYZE email_send_log`.execute(database.db);
  const send = await insertSend(database.db, teamId);
  const hit: HitInput = { kind: 'open', sendLogId: send.id, method: 'GET', ip: '192.0.2.7', userAgent: BROWSER_UA, url: null };
  const limits = { maxHitsPerMessage: 1_000 };
  const results = [];
  for (let i = 0; i < 13; i++) results.push(await recordHit(one.db, hit, limits));
  assert.deepEqual(results.map((r) => r.status === 'recorded' && r.counted), [true, ...Array<boolean>(12).fill(false)]);
  const { rows: [log] } = await sql<{ opens: number; hits: number }>`
    SELECT opens_count AS opens, open_hits_count AS hits FROM email_send_log WHERE id = ${send.id}::uuid`.execute(database.db);
  assert.deepEqual(log, { opens: 1, hits: 13 });

  const patterns = {
    read: '/* prepared */%AS human_counted%FROM email_send_log l%LEFT JOIN contacts c%',
    update: "/* prepared */%UPDATE email_send_log SET open_hits_count%set_config('synchronous_commit', 'off', true)%",
  };
  const names: Record<string, string> = {};
  for (const [what, pattern] of Object.entries(patterns)) {
    const counts = await planCounts(pattern);
    assert.equal(counts.length, 1, `${what}: ${JSON.stringify(counts)}`);
    // The first hit counted (its own statements); each of the twelve repeats ran this one once.
    const { rows: [ps] } = await sql<{ name: string }>`SELECT name FROM pg_prepared_statements WHERE statement LIKE ${pattern}`.execute(one.db);
    names[what] = ps!.name;
    assert.ok(counts[0]!.generic_plans + counts[0]!.custom_plans >= 12, `${what}: ${JSON.stringify(counts)}`);
    assert.equal(counts[0]!.custom_plans, 5, `${what}: ${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
  }
  const update = await genericPlan(names.update!);
  assert.match(update, /One-Time Filter: \(\(InitPlan \d+\)\.col1 IS NOT NULL\)|One-Time Filter: \(\$\d+ IS NOT NULL\)/, update);
  assert.match(update, /email_send_log_pkey/, update);
  const read = await genericPlan(names.read!);
  assert.match(read, /Index Scan using email_send_log_pkey on email_send_log l/, read);
  assert.doesNotMatch(read, /Seq Scan/, read);
});

// A lone transactional submit (mail/emails-routes.ts): its reads of the
// template, account and recipient, the suppression check and the insert are
// prepared, one value written as a scalar and the insert's and the check's
// lists sized recordsets, so from the sixth submit on a connection they run on
// generic plans instead of being planned at every submit (`npm run bench --
// transactional --pg-stats`: 0.07-0.16 ms of planning each). The check's
// generic plan reaches the suppressions by their indexes on a list of some size.
test('a lone transactional submit reads, checks suppressions and inserts on generic plans', async () => {
  const { teamId } = await makeTeam(database.db);
  await sql`
    INSERT INTO suppressions (team_id, email, reason)
    SELECT ${teamId}::uuid, 's' || i || '@example.com', 'manual' FROM generate_series(1, 20000) AS i`.execute(database.db);
  await sql`ANALYZE suppressions`.execute(database.db);
  const { rows: [template] } = await sql<{ id: string }>`
    INSERT INTO templates (team_id, name, subject, content) VALUES (${teamId}::uuid, 'Receipt', 'Hi', '<p>Hi</p>') RETURNING id`.execute(database.db);
  const { rows: [account] } = await sql<{ id: string }>`
    INSERT INTO mail_accounts (team_id, host, port, security, from_email, daily_limit)
    VALUES (${teamId}::uuid, '127.0.0.1', 2525, 'none', 'shop@example.com', 1000) RETURNING id`.execute(database.db);
  const { rows: [contact] } = await sql<{ id: string }>`
    INSERT INTO contacts (team_id, email) VALUES (${teamId}::uuid, 'known@example.com') RETURNING id`.execute(database.db);
  const inserted: string[] = [];
  for (let i = 0; i < 12; i++) {
    const to = `buyer${i}@example.com`;
    const item = { template_id: template!.id, mail_account_id: account!.id, contact_id: contact!.id, to_email: to };
    const [refs, suppressed, [row]] = await one.db.transaction().execute(async (tx) => {
      const r = await loadRefs(tx, teamId, [item]);
      // Once with a second, suppressed, address: another size class.
      const s = await suppressedForAllMail(tx, teamId, i === 3 ? [to, 's7@example.com'] : [to], 'secret');
      const e = await insertEmails(tx, teamId, [{
        template_id: template!.id, mail_account_id: account!.id, contact_id: null, email: to, to_name: null, subject: null,
        status: 'queued', open_tracking: false, click_tracking: false, render: {},
      }]);
      return [r, s, e] as const;
    });
    assert.equal(refs.templates.get(template!.id)?.status, 'active');
    assert.ok(refs.accounts.has(account!.id));
    assert.equal(refs.contactsById.get(contact!.id)?.email, 'known@example.com');
    assert.deepEqual([...suppressed], i === 3 ? ['s7@example.com'] : []);
    inserted.push(row!.id);
  }
  const { rows: [log] } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM email_send_log WHERE id = ANY (${inserted}::uuid[]) AND source = 'transactional'`.execute(database.db);
  assert.equal(log!.n, 12);

  const patterns = {
    template: '/* prepared */%FROM templates WHERE team_id = $1::uuid AND id = $2::uuid',
    account: '/* prepared */%FROM mail_accounts WHERE team_id = $1::uuid AND id = $2::uuid',
    contactById: '/* prepared */%FROM contacts WHERE team_id = $1::uuid AND id = $2::uuid',
    contactByEmail: '/* prepared */%FROM contacts WHERE team_id = $1::uuid AND email = $2::text',
    insert: '/* prepared */%WITH x AS MATERIALIZED%INSERT INTO email_send_log%',
  };
  for (const [what, pattern] of Object.entries(patterns)) {
    const counts = await planCounts(pattern);
    assert.equal(counts.length, 1, `${what}: ${JSON.stringify(counts)}`);
    assert.equal(counts[0]!.generic_plans + counts[0]!.custom_plans, 12, what);
    assert.equal(counts[0]!.custom_plans, 5, `${what}: ${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
  }
  // The check ran for one address (size class 1) eleven times and for two once.
  const checks = await planCounts('/* prepared */%FROM suppressions s%');
  assert.deepEqual(checks.map((c) => c.generic_plans + c.custom_plans).sort((a, b) => a - b), [1, 11], JSON.stringify(checks));
  const lone = checks.find((c) => c.generic_plans + c.custom_plans === 11)!;
  assert.equal(lone.custom_plans, 5, `${lone.generic_plans} generic, ${lone.custom_plans} custom`);
  const { rows: [ps] } = await sql<{ name: string }>`SELECT name FROM pg_prepared_statements WHERE statement = ${lone.statement}`.execute(one.db);
  const plan = await genericPlan(ps!.name);
  assert.match(plan, /suppressions_team_email_idx/, plan);
  assert.match(plan, /suppressions_team_hmac_idx/, plan);
  assert.doesNotMatch(plan, /Seq Scan on suppressions/, plan);
});

// An ingested lead or sale (ingest/ingest.ts): with or without an idempotency
// key, its event and lead or sale rows in one statement; the contact's counters;
// its job (lib/jobs.ts). An unsubscribe claims its row first: the event's
// claim, then its completion. All prepared, so from the sixth on a connection
// they run on generic plans instead of being planned for every event
// (0.03-0.04 ms each, warm, on this machine's PostgreSQL; more under load).
test('ingested events run their statements and enqueue their jobs on generic plans', async () => {
  const { teamId } = await makeTeam(database.db);
  // Their jobs: a webhook subscribes (a campaign's triggers would wait for the decider loop, with no job).
  await createWebhook(database.db, webhookSecretBox(testConfig().appSecret), teamId, { url: 'https://hooks.example.com/g', events: ['email.lead.created', 'email.sale.created'] });
  for (let i = 0; i < 12; i++) {
    for (const name of ['lead.created', 'sale.created'] as const) {
      for (const key of [undefined, `${name}-${i}`]) {
        const r = await ingestEvent(one.db, teamId, {
          event_name: name, email: `buyer${i}@example.com`, idempotency_key: key, payload: { source: 'shop', amount: 5, currency: 'eur' },
        });
        assert.equal(r.duplicate, false);
      }
    }
    const r = await ingestEvent(one.db, teamId, { event_name: 'contact.unsubscribed', email: `buyer${i}@example.com` });
    assert.equal(r.duplicate, false);
  }
  const { rows: [c] } = await sql<{ leads: number; sales: number; unsubscribed: number }>`
    SELECT sum(leads_count)::int AS leads, sum(sales_count)::int AS sales, count(*) FILTER (WHERE status = 'unsubscribed')::int AS unsubscribed
      FROM contacts WHERE team_id = ${teamId}::uuid`.execute(database.db);
  assert.deepEqual(c, { leads: 24, sales: 24, unsubscribed: 12 });
  const patterns = {
    lead: '/* prepared */%WITH v AS MATERIALIZED%INSERT INTO leads%',
    sale: '/* prepared */%WITH v AS MATERIALIZED%INSERT INTO sales%',
    leadsCount: '/* prepared */%UPDATE contacts SET leads_count%',
    salesCount: '/* prepared */%UPDATE contacts SET sales_count%',
    claim: '/* prepared */%INSERT INTO events (team_id, name, idempotency_key%',
    completion: '/* prepared */%UPDATE events SET contact_id%',
  };
  for (const [what, pattern] of Object.entries(patterns)) {
    const counts = await planCounts(pattern);
    assert.equal(counts.length, 1, `${what}: ${JSON.stringify(counts)}`);
    assert.ok(counts[0]!.generic_plans + counts[0]!.custom_plans >= 12, what);
    assert.equal(counts[0]!.custom_plans, 5, `${what}: ${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
  }
  // The completion's generic plan reaches the event by key (the listener checks are one-row subqueries beside it).
  const { rows: [completion] } = await sql<{ name: string }>`
    SELECT name FROM pg_prepared_statements WHERE statement LIKE ${patterns.completion}`.execute(one.db);
  const plan = await genericPlan(completion!.name);
  assert.match(plan, /Index Scan using events_pkey on events/, plan);
  assert.doesNotMatch(plan, /Seq Scan on events/, plan);
  // Each event's process_events job (lib/jobs.ts, addJobs): one statement for any number of jobs.
  const jobs = await planCounts('/* prepared */%graphile_worker.add_jobs%');
  assert.equal(jobs.length, 1, JSON.stringify(jobs));
  assert.ok(jobs[0]!.generic_plans + jobs[0]!.custom_plans >= 48, JSON.stringify(jobs));
  assert.equal(jobs[0]!.custom_plans, 5, JSON.stringify(jobs));
});

// The webhook dispatcher's claim and its result statement (webhooks/
// deliveries.ts): prepared, the results a sized recordset, so a dispatcher's
// batches run on generic plans, and the results' generic plan reaches the
// deliveries by key on a log of any size (a queue table's statistics are
// always stale: with jsonb_to_recordset's fixed estimate of 100 rows it could
// have kept a hash join over the whole table for the connection's life).
test('the webhook claim and results run on generic plans, the results reaching the deliveries by key', async () => {
  const { teamId } = await makeTeam(database.db);
  const hook = await createWebhook(database.db, webhookSecretBox(testConfig().appSecret), teamId, { url: 'https://hooks.example.com/p', events: ['email.sent'] });
  await sql`
    INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, next_attempt_at)
    SELECT plover_uuid_v7(), ${teamId}::uuid, ${hook.id}::uuid, 'email.sent', '{}'::json,
           CASE WHEN i <= 24 THEN now() - interval '1 minute' ELSE now() + interval '1 hour' END
      FROM generate_series(1, 6000) AS i`.execute(database.db);
  await sql`ANALYZE webhook_deliveries`.execute(database.db);
  let recorded = 0;
  for (let i = 0; i < 8; i++) {
    const claimed = await claimDueDeliveries(one.db, 3, 60_000);
    assert.equal(claimed.length, 3);
    await recordAttempts(one.db, claimed.map((c) => ({
      id: c.id, webhook_id: c.webhook_id, lease: c.lease, at: new Date(), status: 'success' as const, response_code: 200,
      response_body: null, error: null, duration_ms: 3, next_attempt_at: null, gone: false,
    })));
    recorded += claimed.length;
  }
  const { rows: [done] } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = ${hook.id}::uuid AND status = 'success'`.execute(database.db);
  assert.equal(done!.n, recorded);
  const patterns = { claim: '/* prepared */%FROM plover_claim_webhook_deliveries%', results: '/* prepared */%UPDATE webhook_deliveries d SET%' };
  const names: Record<string, string> = {};
  for (const [what, pattern] of Object.entries(patterns)) {
    const counts = await planCounts(pattern);
    assert.equal(counts.length, 1, `${what}: ${JSON.stringify(counts)}`);
    assert.equal(counts[0]!.generic_plans + counts[0]!.custom_plans, 8, what);
    assert.equal(counts[0]!.custom_plans, 5, `${what}: ${counts[0]!.generic_plans} generic, ${counts[0]!.custom_plans} custom`);
    const { rows: [ps] } = await sql<{ name: string }>`SELECT name FROM pg_prepared_statements WHERE statement LIKE ${pattern}`.execute(one.db);
    names[what] = ps!.name;
  }
  const plan = await genericPlan(names.results!);
  assert.match(plan, /Index Scan using webhook_deliveries_pkey on webhook_deliveries d/, plan);
  assert.doesNotMatch(plan, /Seq Scan on webhook_deliveries/, plan);
});

// The decider loop's work list (campaigns/engine.ts, waitingTeams) runs every
// 50 ms in every worker: prepared, so from the sixth call on a connection it runs
// on its generic plan, which must walk the partial index of undecided events too.
test('the decider loop\'s work list walks the undecided index on its generic plan', async () => {
  const { teamId } = await makeTeam(database.db);
  for (let i = 0; i < 7; i++) await waitingTeams(one.db, i % 2 === 0 ? null : teamId, 100);
  const { rows: [ps] } = await sql<{ name: string }>`
    SELECT name FROM pg_prepared_statements WHERE statement LIKE '/* prepared */%WITH RECURSIVE t(team_id)%'`.execute(one.db);
  assert.ok(ps, 'prepared');
  const plan = await genericPlan(ps.name);
  assert.match(plan, /events_undecided_idx/, plan);
  assert.doesNotMatch(plan, /Seq Scan on events|events_team_id_idempotency_key_key|Sort/, plan);
});
