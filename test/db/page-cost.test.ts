// Plover's sessions plan with random_page_cost 1.1 (src/db/pool.ts). With
// PostgreSQL's default of 4, the send path's batch statements joined a batch
// of ids to a young table (a new service's message log, a new team's contacts:
// a few thousand rows) by a hash join over a sequential scan of the whole
// table, once per batch, as a generic plan and as a custom one. Here, on such a
// table, each statement's generic plan (as a prepared statement runs it after
// five calls) must reach the log and the contacts by their keys, and the same
// plan at cost 4 must not (else the table is not young enough to prove anything).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { createPool, RANDOM_PAGE_COST } from '../../src/db/pool.ts';
import { claimManyForSmtp } from '../../src/mail/daily-usage.ts';
import { recordResults } from '../../src/mail/send-record.ts';
import { addMessageFacts } from '../../src/stats/deltas.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { insertAccount } from '../engine/fixtures.ts';
import { captured, type Sent } from '../lib/statements.ts';

const ROWS = 1_500;
const BATCH = 32;
const WATCHED = ['email_send_log', 'contacts'];

let t: TestApp;
let teamId: string;
let accountId: string;
before(async () => {
  t = await buildTestApp();
  ({ teamId } = await makeTeam(t.database.db));
  accountId = await insertAccount(t, teamId, 2525);
  await sql`
    INSERT INTO contacts (team_id, email)
    SELECT ${teamId}::uuid, 'c' || i || '@example.com' FROM generate_series(1, ${ROWS}::int) AS i`.execute(t.database.db);
  await sql`
    INSERT INTO email_send_log (team_id, mail_account_id, contact_id, email, status, subject, smtp_response)
    SELECT c.team_id, ${accountId}::uuid, c.id, c.email, CASE WHEN row_number() OVER (ORDER BY c.email) <= ${BATCH}::int THEN 'queued' ELSE 'sent' END,
           'A subject of a usual length for a newsletter', '250 2.0.0 OK queued as 4ABCDEF0123456789 (a relay answer)'
      FROM contacts c WHERE c.team_id = ${teamId}::uuid`.execute(t.database.db);
  await sql`ANALYZE email_send_log`.execute(t.database.db);
  await sql`ANALYZE contacts`.execute(t.database.db);
});
after(() => t.close());

type PlanNode = { 'Node Type': string; 'Relation Name'?: string; Plans?: PlanNode[] };

function seqScanned(plan: PlanNode): string[] {
  const found: string[] = [];
  const walk = (n: PlanNode) => {
    if (n['Node Type'] === 'Seq Scan' && n['Relation Name'] && WATCHED.includes(n['Relation Name'])) found.push(n['Relation Name']);
    n.Plans?.forEach(walk);
  };
  walk(plan);
  return found;
}

/** A parameter as SQL text, for EXECUTE (which takes expressions, not bound values). */
function literal(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (v instanceof Date) return `'${v.toISOString()}'`;
  if (typeof v === 'string') return `'${v.replace(/'/g, "''")}'`;
  throw new Error(`literal: no SQL text for a ${typeof v}`);
}

/** The WATCHED tables the generic plan of `s` reads by a sequential scan, planned on `client` (in a transaction rolled back). */
async function genericSeqScans(client: pg.ClientBase, s: Sent): Promise<string[]> {
  await client.query('BEGIN');
  try {
    await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
    await client.query(`PREPARE page_cost_probe AS ${s.text}`);
    const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `EXPLAIN (FORMAT JSON) EXECUTE page_cost_probe (${s.values.map(literal).join(', ')})`);
    return seqScanned(rows[0]!['QUERY PLAN'][0].Plan);
  } finally {
    await client.query('ROLLBACK');
    await client.query('DEALLOCATE page_cost_probe').catch(() => {}); // absent if PREPARE failed: keep that error
  }
}

/** The claim, the result update, the contact counters and the statistics delta of one batch, as sent. */
async function batchStatements(): Promise<Sent[]> {
  const { rows: queued } = await sql<{ id: string }>`
    SELECT id FROM email_send_log WHERE team_id = ${teamId}::uuid AND status = 'queued' ORDER BY id`.execute(t.database.db);
  assert.equal(queued.length, BATCH);
  const sent = await captured(/UPDATE email_send_log SET status = 'sending'|UPDATE email_send_log l|UPDATE contacts c SET|INSERT INTO stats_deltas/, async () => {
    const claims = await claimManyForSmtp(t.database.db, accountId, teamId, 1_000, queued.map((r) => ({ id: r.id, slotDay: null })));
    assert.equal(claims.filter(Boolean).length, BATCH, 'all claimed');
    const { rows } = await sql<{ id: string; contact_id: string; email: string; attempts: number }>`
      SELECT id, contact_id, email, attempts FROM email_send_log WHERE id = ANY (${queued.map((r) => r.id)}::uuid[]) ORDER BY id`.execute(t.database.db);
    await recordResults(t.database.db, testConfig(), rows.map((r, i) => ({
      row: { id: r.id, team_id: teamId, campaign_id: null, campaign_send_id: null, contact_id: r.contact_id, email: r.email, attempts: r.attempts },
      outcome: { kind: 'sent' as const, response: '250 OK' }, messageId: `p${i}@plover.test`, subject: 'Hi', accountId,
    })));
    await addMessageFacts(t.database.db, rows.map((r) => ({ messageId: r.id, key: 'delivered', at: new Date() })));
  });
  return sent;
}

test('the batch statements reach a young log and young contacts by key at Plover\'s page cost, and would scan them at 4', async () => {
  const statements = await batchStatements();
  const kinds = statements.map((s) =>
    /SET status = 'sending'/.test(s.text) ? 'claim' : /UPDATE email_send_log l/.test(s.text) ? 'result' : /UPDATE contacts/.test(s.text) ? 'contacts' : 'stats');
  assert.deepEqual([...new Set(kinds)].sort(), ['claim', 'contacts', 'result', 'stats']);

  const client = await t.database.pool.connect();
  try {
    const { rows } = await client.query<{ random_page_cost: string }>('SHOW random_page_cost');
    assert.equal(Number(rows[0]!.random_page_cost), RANDOM_PAGE_COST, 'the pool sets it on every session');
    let scannedAtFour = 0;
    for (const [i, s] of statements.entries()) {
      assert.deepEqual(await genericSeqScans(client, s), [], `${kinds[i]}: ${s.text.slice(0, 70)}`);
      await client.query('SET random_page_cost = 4');
      try {
        if ((await genericSeqScans(client, s)).length > 0) scannedAtFour++;
      } finally {
        await client.query(`SET random_page_cost = ${RANDOM_PAGE_COST}`);
      }
    }
    // The statements that join the batch to the log or contacts with a hash join at cost 4 (the trap this guards against).
    assert.ok(scannedAtFour >= 2, `at random_page_cost 4, ${scannedAtFour} of ${statements.length} generic plans scan a table: the table is too large for this test to prove anything`);
  } finally {
    client.release();
  }
});

test('randomPageCost null leaves the server\'s setting; a number sets it', async () => {
  const plain = new pg.Client({ connectionString: t.database.url });
  await plain.connect();
  const serverValue = (await plain.query<{ random_page_cost: string }>('SHOW random_page_cost')).rows[0]!.random_page_cost;
  await plain.end();
  for (const [option, expected] of [[null, serverValue], [2.5, '2.5']] as const) {
    const pool = createPool(t.database.url, 1, { randomPageCost: option });
    try {
      const { rows } = await pool.query<{ random_page_cost: string }>('SHOW random_page_cost');
      assert.equal(rows[0]!.random_page_cost, expected, `randomPageCost ${option}`);
    } finally {
      await pool.end();
    }
  }
  assert.throws(() => createPool(t.database.url, 1, { randomPageCost: 0 }), RangeError);
  assert.throws(() => createPool(t.database.url, 1, { randomPageCost: Number.NaN }), RangeError);
});

test('DATABASE_RANDOM_PAGE_COST: default 1.1, `server`, a number, and refusals', () => {
  const load = (v: string | undefined) => loadConfig({ DATABASE_RANDOM_PAGE_COST: v }).databaseRandomPageCost;
  assert.equal(load(undefined), 1.1);
  assert.equal(load(''), 1.1);
  assert.equal(load('server'), null);
  assert.equal(load(' Server '), null);
  assert.equal(load('4'), 4);
  assert.equal(load('1.5'), 1.5);
  for (const bad of ['0', '0.05', '101', 'abc', '-1', '1e2', '1.', 'Infinity']) {
    assert.throws(() => load(bad), ConfigError, bad);
  }
});
