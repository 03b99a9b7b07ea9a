// The send path's batch statements join a batch (a JSON array of rows) to the
// message log and to contacts by id. PostgreSQL estimates a set-returning
// function at 100 rows whatever it returns, so against a table of a few
// thousand rows it chose a hash join over a sequential scan of the whole
// table, once per batch (src/db/recordset.ts): in `npm run bench -- campaigns`
// the claim alone read ~300 pages per call. Here each statement runs for real
// on a log of 6,000 analysed rows and 6,000 contacts, and its plan (EXPLAIN of
// the very text and parameters it sent) must reach those tables by index.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { claimManyForSmtp } from '../../src/mail/daily-usage.ts';
import { deleteMailAccount } from '../../src/mail/accounts-manage.ts';
import { runRetention } from '../../src/ops/retention.ts';
import { waitingTeams } from '../../src/campaigns/engine.ts';
import { TRIGGER_EVENTS } from '../../src/events/triggers.ts';
import { completeSendsOfMessages } from '../../src/campaigns/finish.ts';
import { recordResults, type SendResult } from '../../src/mail/send-record.ts';
import { addMessageFacts } from '../../src/stats/deltas.ts';
import { addSuppressions } from '../../src/contacts/suppressions.ts';
import { recordset, sizeClass } from '../../src/db/recordset.ts';
import { createDb, createPool, RANDOM_PAGE_COST } from '../../src/db/pool.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { insertAccount } from '../engine/fixtures.ts';
import { captured, type Sent } from '../lib/statements.ts';
import { indexesOf, planNodes } from '../lib/plans.ts';

const ROWS = 6_000;
const WATCHED = ['email_send_log', 'contacts'];

let t: TestApp;
let teamId: string;
let accountId: string;
before(async () => {
  t = await buildTestApp();
  ({ teamId } = await makeTeam(t.database.db));
  accountId = await insertAccount(t, teamId, 2525);
  // A young log: mostly sent, a few queued (the batch below), every message to a contact.
  await sql`
    INSERT INTO contacts (team_id, email)
    SELECT ${teamId}::uuid, 'c' || i || '@example.com' FROM generate_series(1, ${ROWS}::int) AS i;
    `.execute(t.database.db);
  await sql`
    INSERT INTO email_send_log (team_id, mail_account_id, contact_id, email, status)
    SELECT c.team_id, ${accountId}::uuid, c.id, c.email, CASE WHEN row_number() OVER (ORDER BY c.email) <= 4 THEN 'queued' ELSE 'sent' END
      FROM contacts c WHERE c.team_id = ${teamId}::uuid`.execute(t.database.db);
  await sql`ANALYZE email_send_log`.execute(t.database.db);
  await sql`ANALYZE contacts`.execute(t.database.db);
});
after(() => t.close());

/** A parameter as SQL text, for EXECUTE (which takes expressions, not bound values). */
function literal(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (v instanceof Date) return `'${v.toISOString()}'`;
  if (typeof v === 'string') return `'${v.replace(/'/g, "''")}'`;
  throw new Error(`literal: no SQL text for a ${typeof v}`);
}

type PlanNode = { 'Node Type': string; 'Relation Name'?: string; Plans?: PlanNode[] };

type Explained = { 'QUERY PLAN': [{ Plan: PlanNode }] };

/** The tables of WATCHED that a plan (EXPLAIN's JSON) reads by a sequential scan. */
function scannedTables(rows: Explained[]): string[] {
  const found: string[] = [];
  const walk = (n: PlanNode) => {
    if (n['Node Type'] === 'Seq Scan' && n['Relation Name'] && WATCHED.includes(n['Relation Name'])) found.push(n['Relation Name']);
    n.Plans?.forEach(walk);
  };
  walk(rows[0]!['QUERY PLAN'][0].Plan);
  return found;
}

/**
 * The tables of WATCHED that the plan of this statement reads by a sequential
 * scan, planned at random_page_cost `pageCost` when given, else at both the
 * pool's (src/db/pool.ts) and PostgreSQL's default of 4 (which a deployment
 * keeps with DATABASE_RANDOM_PAGE_COST=server): the batch sizing must hold at either.
 */
async function seqScans(s: Sent, pageCost?: number): Promise<string[]> {
  const client = await t.database.pool.connect();
  try {
    const found = new Set<string>();
    for (const cost of pageCost === undefined ? [RANDOM_PAGE_COST, 4] : [pageCost]) {
      await client.query(`SET random_page_cost = ${cost}`);
      for (const table of scannedTables((await client.query<Explained>({ text: `EXPLAIN (FORMAT JSON) ${s.text}`, values: s.values })).rows)) found.add(table);
    }
    return [...found];
  } finally {
    await client.query(`SET random_page_cost = ${RANDOM_PAGE_COST}`);
    client.release();
  }
}

/** Like seqScans, for the generic plan of the statement prepared as `name` on the pool's one connection. */
async function genericSeqScans(pool: ReturnType<typeof createPool>, name: string, values: unknown[]): Promise<string[]> {
  const client = await pool.connect();
  try {
    await client.query('SET plan_cache_mode = force_generic_plan');
    return scannedTables((await client.query<Explained>(`EXPLAIN (FORMAT JSON) EXECUTE "${name}" (${values.map(literal).join(', ')})`)).rows);
  } finally {
    await client.query('RESET plan_cache_mode');
    client.release();
  }
}

/** The indexes through which the plan of this statement (at the pool's page cost) reads the log. */
async function logIndexes(s: Sent): Promise<string[]> {
  return indexesOf(await planNodes(t.database.pool, s), 'email_send_log');
}

const queuedIds = async () =>
  (await sql<{ id: string }>`SELECT id FROM email_send_log WHERE team_id = ${teamId}::uuid AND status = 'queued' ORDER BY id`.execute(t.database.db)).rows.map((r) => r.id);

// At PostgreSQL's default random_page_cost (4), which a deployment keeps with
// DATABASE_RANDOM_PAGE_COST=server: the sizing alone must keep the plan on the index.
test('the check itself: at page cost 4, a join of 100 estimated rows to the log scans it, a sized recordset of 4 does not', async () => {
  const ids = JSON.stringify((await queuedIds()).map((id) => ({ id })));
  const join = (from: string) => `SELECT l.id FROM ${from} JOIN email_send_log l ON l.id = x.id AND l.status IN ('queued', 'deferred')`;
  const bare = await seqScans({ text: join(`jsonb_to_recordset($1::jsonb) AS x (id uuid)`), values: [ids] }, 4);
  assert.deepEqual(bare, ['email_send_log'], 'without the size the planner scans the log (if not, this test proves nothing)');
  const sized = recordset(ids, 4, 'x (id uuid)').compile(t.database.db);
  assert.deepEqual(await seqScans({ text: join(`${sized.sql} AS x`), values: [...sized.parameters] }, 4), []);
});

test('a batch claim reaches the log by its primary key', async () => {
  const ids = await queuedIds();
  assert.equal(ids.length, 4);
  let claims: unknown[] = [];
  const sent = await captured(/UPDATE email_send_log SET status = 'sending'/, async () => {
    claims = await claimManyForSmtp(t.database.db, accountId, teamId, 500, ids.map((id) => ({ id, slotDay: null })));
  });
  assert.equal(claims.filter(Boolean).length, 4, 'all four claimed');
  assert.equal(sent.length, 1);
  assert.deepEqual(await seqScans(sent[0]!), []);
  // By its primary key only: the account's index of waiting messages has the
  // claim's status condition too, and read for a claim it would be every
  // waiting message (migration 0033).
  assert.deepEqual(await logIndexes(sent[0]!), ['email_send_log_pkey']);
});

test('recording results reaches the log and the contacts by their keys, and so do the statistics', async () => {
  const { rows } = await sql<{ id: string; contact_id: string; email: string; attempts: number }>`
    SELECT id, contact_id, email, attempts FROM email_send_log WHERE team_id = ${teamId}::uuid AND status = 'sending' ORDER BY id`.execute(t.database.db);
  assert.equal(rows.length, 4);
  const results: SendResult[] = rows.map((r, i) => ({
    row: { id: r.id, team_id: teamId, campaign_id: null, campaign_send_id: null, contact_id: r.contact_id, email: r.email, attempts: r.attempts },
    outcome: i === 0 ? { kind: 'hard', response: '550 5.1.1 no such user' } : { kind: 'sent', response: '250 2.0.0 OK queued as abc' },
    messageId: `m${i}@plover.test`, subject: 'Hello', accountId,
  }));
  const all = await captured(/UPDATE email_send_log l|UPDATE contacts c SET|INSERT INTO stats_deltas|SET LOCAL synchronous_commit/, () => recordResults(t.database.db, testConfig(), results));
  // No campaign send among these messages: no second transaction for campaign counters.
  assert.equal(all.filter((s) => /SET LOCAL/.test(s.text)).length, 0, 'no counters transaction');
  const sent = all.filter((s) => !/SET LOCAL/.test(s.text));
  const kinds = sent.map((s) => /UPDATE email_send_log l/.test(s.text) ? 'log' : /UPDATE contacts/.test(s.text) ? 'contacts' : 'stats');
  assert.deepEqual([...new Set(kinds)].sort(), ['contacts', 'log', 'stats'], 'the three statements ran');
  for (const s of sent) assert.deepEqual(await seqScans(s), [], s.text.slice(0, 80));
  const { rows: after } = await sql<{ status: string; n: number }>`
    SELECT status, count(*)::int AS n FROM email_send_log WHERE id = ANY (${rows.map((r) => r.id)}::uuid[]) GROUP BY status ORDER BY status`.execute(t.database.db);
  assert.deepEqual(after, [{ status: 'bounced_hard', n: 1 }, { status: 'sent', n: 3 }]);
  const { rows: counted } = await sql<{ sent: number }>`SELECT coalesce(sum(sent_count), 0)::int AS sent FROM contacts WHERE team_id = ${teamId}::uuid`.execute(t.database.db);
  assert.equal(counted[0]!.sent, 3);
});

test('message facts (statistics) join the log by its primary key', async () => {
  const ids = (await sql<{ id: string }>`SELECT id FROM email_send_log WHERE team_id = ${teamId}::uuid AND status = 'sent' ORDER BY id LIMIT 3`.execute(t.database.db)).rows;
  const sent = await captured(/INSERT INTO stats_deltas/, () => addMessageFacts(t.database.db, ids.map((r) => ({ messageId: r.id, key: 'delivered', at: new Date() }))));
  assert.equal(sent.length, 1);
  assert.deepEqual(await seqScans(sent[0]!), []);
});

test('adding suppressions reaches the team\'s contacts by their address, not by a scan', async () => {
  const emails = ['c11@example.com', 'c12@example.com', 'c13@example.com'];
  let result: Awaited<ReturnType<typeof addSuppressions>> | undefined;
  const sent = await captured(/UPDATE contacts k SET status/, () =>
    t.database.db.transaction().execute(async (tx) => {
      result = await addSuppressions(tx, teamId, emails.map((email) => ({ email, reason: 'unsubscribed' as const })));
    }));
  assert.equal(result!.contacts_changed, 3);
  assert.equal(sent.length, 1);
  assert.deepEqual(await seqScans(sent[0]!), []);
  const { rows } = await sql<{ status: string }>`
    SELECT status FROM contacts WHERE team_id = ${teamId}::uuid AND email = ANY (${emails}::text[])`.execute(t.database.db);
  assert.deepEqual(rows.map((r) => r.status), ['unsubscribed', 'unsubscribed', 'unsubscribed']);
});

test('size classes: never below the batch, at most 1.5 times it, a handful of texts', () => {
  for (let n = 0; n <= 2_000; n++) {
    const c = sizeClass(n);
    assert.ok(c >= n && c <= Math.max(2, n * 1.5), `${n} -> ${c}`);
  }
  assert.deepEqual([1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 50].map(sizeClass), [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]);
  assert.equal(new Set(Array.from({ length: 64 }, (_, i) => sizeClass(i + 1))).size, 12, 'batches of 1 to 64 rows: 12 statement texts');
});

// Prepared and sized by class, the claim and the result statements are planned
// five times per connection and text, then run on their generic plan (sized by
// its size, not by the values). That plan must still reach the log and the
// contacts by their keys. One connection, so pg_prepared_statements sees them all.
test('the claim and the results run on generic plans after five calls, and those plans reach the tables by key', async () => {
  const pool = createPool(t.database.url, 1);
  const one = createDb(pool);
  try {
    const ids = (await sql<{ id: string }>`SELECT id FROM email_send_log WHERE team_id = ${teamId}::uuid AND status <> 'sending' ORDER BY id LIMIT 3`.execute(t.database.db)).rows.map((r) => r.id);
    const requeue = () => sql`UPDATE email_send_log SET status = 'queued' WHERE id = ANY (${ids}::uuid[])`.execute(t.database.db);
    const pattern = /UPDATE email_send_log SET status = 'sending'|UPDATE email_send_log l|UPDATE contacts c SET|INSERT INTO stats_deltas/;
    let last: Sent[] = [];
    for (let round = 0; round < 8; round++) {
      await requeue();
      last = await captured(pattern, async () => {
        const claims = await claimManyForSmtp(one, accountId, teamId, 100_000, ids.map((id) => ({ id, slotDay: null })));
        assert.equal(claims.filter(Boolean).length, 3, `round ${round}: all three claimed`);
        const { rows } = await sql<{ id: string; contact_id: string; email: string; attempts: number }>`
          SELECT id, contact_id, email, attempts FROM email_send_log WHERE id = ANY (${ids}::uuid[]) ORDER BY id`.execute(one);
        await recordResults(one, testConfig(), rows.map((r, i) => ({
          row: { id: r.id, team_id: teamId, campaign_id: null, campaign_send_id: null, contact_id: r.contact_id, email: r.email, attempts: r.attempts },
          outcome: { kind: 'sent' as const, response: '250 OK' }, messageId: `g${round}.${i}@plover.test`, subject: 'Hi', accountId,
        })));
      });
    }
    assert.equal(last.length, 4, last.map((s) => s.text.slice(0, 40)).join(' | '));
    const { rows: prepared } = await sql<{ name: string; statement: string; generic_plans: number; custom_plans: number }>`
      SELECT name, statement, generic_plans::int, custom_plans::int FROM pg_prepared_statements`.execute(one);
    for (const s of last) {
      const p = prepared.find((r) => r.statement === s.text);
      assert.ok(p, `prepared: ${s.text.slice(0, 60)}`);
      assert.equal(p.generic_plans + p.custom_plans, 8, s.text.slice(0, 60));
      assert.ok(p.generic_plans >= 3, `${s.text.slice(0, 60)}: ${p.generic_plans} generic, ${p.custom_plans} custom`);
      assert.deepEqual(await genericSeqScans(pool, p.name, s.values), [], s.text.slice(0, 60));
    }
  } finally {
    await one.destroy();
  }
});


// Deleting a mail account cancels its waiting messages with the account's row
// locked (deciders for it wait): they are found by the account, through the
// index of waiting messages, not by reading the team's whole log.
test('deleting a mail account finds its waiting messages through the account\'s index of them', async () => {
  const other = await insertAccount(t, teamId, 2525);
  await sql`
    INSERT INTO email_send_log (team_id, mail_account_id, email, status, source)
    SELECT ${teamId}::uuid, ${other}::uuid, 'w' || i || '@example.com', 'queued', 'campaign' FROM generate_series(1, 10) AS i`.execute(t.database.db);
  let deleted: Awaited<ReturnType<typeof deleteMailAccount>> | undefined;
  const sent = await captured(/UPDATE email_send_log SET status = 'cancelled', last_error = 'mail account deleted'/, async () => {
    deleted = await deleteMailAccount(t.database.db, teamId, other);
  });
  assert.equal(deleted?.cancelled, 10);
  assert.equal(sent.length, 1);
  assert.deepEqual(await logIndexes(sent[0]!), ['email_send_log_account_pending_idx']);
});

// Retention keeps an event while a message of it still waits: checked per
// candidate event, by the log's event index, not by reading the log.
test('the events retention finds messages of an event through the log\'s event index', async () => {
  const sent = await captured(/DELETE FROM "events"/, async () => {
    await runRetention(t.database.db, { eventsDays: 1, messagesDays: 0, trackingHitsDays: 0, webhookDeliveriesDays: 0, batchSize: 1000, pauseMs: 0 });
  });
  assert.equal(sent.length, 1);
  assert.deepEqual(await seqScans(sent[0]!), []);
  assert.deepEqual(await logIndexes(sent[0]!), ['email_send_log_event_idx']);
});

// The decider loop's look for teams with events to decide (src/campaigns/
// engine.ts, waitingTeams) runs every 50 ms when idle. Statistics taken while a
// burst of events was undecided say that most events match; a check planned
// from them as a sequential scan expected to stop at once read every event of
// the table to find none (an EXISTS of an earlier version did). It must walk
// the partial index of undecided events whatever the statistics say.
// The code's trigger list (TRIGGER_NAMES_SQL) and the partial index's predicate
// (migration 0008) are written in two places; the planner uses the index only
// while they name the same events.
test('the undecided-events index names exactly the trigger events the code lists', async () => {
  const { rows } = await sql<{ pred: string }>`
    SELECT pg_get_expr(indpred, indrelid) AS pred FROM pg_index WHERE indexrelid = 'events_undecided_idx'::regclass`.execute(t.database.db);
  const names = [...rows[0]!.pred.matchAll(/'([^']*)'::text/g)].map((m) => m[1]);
  assert.deepEqual(names.sort(), [...TRIGGER_EVENTS].sort(), rows[0]!.pred);
});

test('the decider loop\'s look for waiting teams walks the undecided index, even when the statistics say most events wait', async () => {
  const { teamId: burst } = await makeTeam(t.database.db, 'Burst');
  await sql`
    INSERT INTO contacts (team_id, email) SELECT ${burst}::uuid, 'b' || i || '@example.com' FROM generate_series(1, 5000) AS i`.execute(t.database.db);
  await sql`
    INSERT INTO events (team_id, name, contact_id, payload, occurred_at)
    SELECT c.team_id, 'contact.saved', c.id, '{}'::jsonb, now() FROM contacts c WHERE c.team_id = ${burst}::uuid`.execute(t.database.db);
  // Analysed while the burst waits; then the decider catches up (no new statistics).
  await sql`ANALYZE events`.execute(t.database.db);
  await sql`UPDATE events SET decided_at = now() WHERE team_id = ${burst}::uuid`.execute(t.database.db);

  let waiting: string[] = [];
  const sent = await captured(/FROM events/, async () => {
    waiting = await waitingTeams(t.database.db, null, 100_000);
  });
  assert.ok(!waiting.includes(burst));
  assert.equal(sent.length, 1);
  const nodes = await planNodes(t.database.pool, sent[0]!, { analyze: true });
  const events = nodes.filter((n) => n['Relation Name'] === 'events');
  assert.deepEqual(events.map((n) => n['Node Type']).filter((n) => n.includes('Seq Scan')), [], 'no sequential scan of events');
  assert.deepEqual(indexesOf(nodes, 'events'), ['events_undecided_idx']);
  // At most the dead index entries of the burst are visited, never the table: each removed by the heap check, none by a filter.
  assert.equal(events.reduce((sum, n) => sum + (n['Rows Removed by Filter'] ?? 0), 0), 0);

  // And it answers: one event waiting is found.
  const { rows: c } = await sql<{ id: string }>`SELECT id FROM contacts WHERE team_id = ${burst}::uuid LIMIT 1`.execute(t.database.db);
  await sql`INSERT INTO events (team_id, name, contact_id, payload) VALUES (${burst}::uuid, 'lead.created', ${c[0]!.id}::uuid, '{}'::jsonb)`.execute(t.database.db);
  assert.ok((await waitingTeams(t.database.db, null, 100_000)).includes(burst));
});

// After every send job: are the sends of its messages complete? Keyed by the
// messages (prepared, a sized recordset): the log by its primary key, not by
// reading every message of a campaign send.
test('completing the sends of a job\'s messages reaches the log by its primary key', async () => {
  const { rows: c } = await sql<{ id: string }>`
    INSERT INTO campaigns (team_id, name, draft_data, trigger_events) VALUES (${teamId}::uuid, 'Broadcast', '{}', '{}') RETURNING id`.execute(t.database.db);
  const { rows: s } = await sql<{ id: string }>`
    INSERT INTO campaign_sends (team_id, campaign_id, campaign_type, status, send_data, list_built)
    VALUES (${teamId}::uuid, ${c[0]!.id}::uuid, 'broadcast', 'sending', '{}'::jsonb, true) RETURNING id`.execute(t.database.db);
  // A sent broadcast of 6,000 messages (every contact), analysed; the job's four messages are its last.
  const { rows } = await sql<{ id: string }>`
    INSERT INTO email_send_log (team_id, mail_account_id, contact_id, campaign_send_id, email, status)
    SELECT c.team_id, ${accountId}::uuid, c.id, ${s[0]!.id}::uuid, c.email, 'sent' FROM contacts c WHERE c.team_id = ${teamId}::uuid
    RETURNING id`.execute(t.database.db);
  await sql`ANALYZE email_send_log`.execute(t.database.db);
  const ids = rows.slice(-4).map((r) => r.id);
  const sent = await captured(/UPDATE campaign_sends s SET status = 'completed'/, () => completeSendsOfMessages(t.database.db, ids));
  assert.equal(sent.length, 1);
  assert.ok(sent[0]!.text.startsWith('/* prepared */'), 'a prepared statement');
  assert.deepEqual(await seqScans(sent[0]!), []);
  // The call itself completed the send (no message of it is left to attempt).
  const { rows: done } = await sql<{ status: string }>`SELECT status FROM campaign_sends WHERE id = ${s[0]!.id}::uuid`.execute(t.database.db);
  assert.equal(done[0]!.status, 'completed');
  // The job's messages by primary key; the send's remaining messages by its index (the completion check).
  const nodes = await planNodes(t.database.pool, sent[0]!);
  assert.deepEqual(indexesOf(nodes, 'email_send_log').sort(), ['email_send_log_campaign_send_idx', 'email_send_log_pkey']);
});
