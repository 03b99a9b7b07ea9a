// Lookups of webhook_deliveries by event_id (the foreign key's ON DELETE SET
// NULL when retention deletes an event, retention's check for pending
// deliveries, erasure) are served by UNIQUE (event_id, webhook_id); migration
// 0030 dropped the partial index that repeated it. On a log of 6,000 analysed
// deliveries, each of those statements must reach the table by an index.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

const ROWS = 6_000;
let database: TestDatabase;
let teamId: string;
let eventIds: string[];
before(async () => {
  database = await createTestDatabase();
  ({ teamId } = await makeTeam(database.db));
  const { rows: hook } = await sql<{ id: string }>`
    INSERT INTO webhooks (team_id, url, events, secret_enc)
    VALUES (${teamId}::uuid, 'http://127.0.0.1:9/', ARRAY['email.contact.saved'], '\\x00'::bytea) RETURNING id`.execute(database.db);
  eventIds = (await sql<{ id: string }>`
    INSERT INTO events (team_id, name, payload)
    SELECT ${teamId}::uuid, 'contact.saved', '{}'::jsonb FROM generate_series(1, ${ROWS}::int) RETURNING id`.execute(database.db)).rows.map((r) => r.id);
  await sql`
    INSERT INTO webhook_deliveries (id, team_id, webhook_id, event_id, event, status)
    SELECT plover_uuid_v7(), ${teamId}::uuid, ${hook[0]!.id}::uuid, e.id, 'email.contact.saved',
           CASE WHEN row_number() OVER (ORDER BY e.id) % 2 = 0 THEN 'pending' ELSE 'success' END
      FROM events e WHERE e.team_id = ${teamId}::uuid`.execute(database.db);
  // Half of them still pending, as a busy queue has.
  await sql`ANALYZE webhook_deliveries`.execute(database.db);
});
after(() => database.drop());

type PlanNode = { 'Node Type': string; 'Relation Name'?: string; 'Index Name'?: string; Plans?: PlanNode[] };

/** How the plan reaches webhook_deliveries: the scan nodes on it, by type and index. */
async function access(text: string, values: unknown[]): Promise<string[]> {
  const { rows } = await database.pool.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>({ text: `EXPLAIN (FORMAT JSON) ${text}`, values });
  const found: string[] = [];
  const walk = (n: PlanNode) => {
    if (n['Relation Name'] === 'webhook_deliveries' || n['Index Name']?.startsWith('webhook_deliveries')) found.push(`${n['Node Type']} ${n['Index Name'] ?? ''}`.trim());
    n.Plans?.forEach(walk);
  };
  walk(rows[0]!['QUERY PLAN'][0].Plan);
  return found;
}

test('lookups by event_id use the unique (event_id, webhook_id) index, never a scan of the log', async () => {
  const one = eventIds[100]!;
  const statements: [string, string, unknown[]][] = [
    // What the foreign key's ON DELETE SET NULL runs for a deleted event.
    ['foreign key action', 'UPDATE webhook_deliveries SET event_id = NULL WHERE event_id = $1::uuid', [one]],
    // src/ops/retention.ts: an event with a pending delivery is kept.
    ['retention check', `SELECT 1 FROM webhook_deliveries d WHERE d.event_id = $1::uuid AND d.status = 'pending'`, [one]],
    // src/contacts/erase.ts.
    ['erasure', 'DELETE FROM webhook_deliveries WHERE team_id = $1::uuid AND event_id = ANY ($2::uuid[])', [teamId, eventIds.slice(0, 3)]],
  ];
  for (const [what, text, values] of statements) {
    const nodes = await access(text, values);
    assert.ok(nodes.length > 0, `${what}: ${JSON.stringify(nodes)}`);
    assert.ok(nodes.every((n) => !n.startsWith('Seq Scan')), `${what}: ${JSON.stringify(nodes)}`);
    assert.ok(nodes.some((n) => n.includes('webhook_deliveries_event_id_webhook_id_key')), `${what}: ${JSON.stringify(nodes)}`);
  }
});

test('deleting an event still unlinks its delivery (the foreign key acts, by that index)', async () => {
  const victim = eventIds[200]!;
  const { rows: before } = await sql<{ id: string }>`SELECT id FROM webhook_deliveries WHERE event_id = ${victim}::uuid`.execute(database.db);
  assert.equal(before.length, 1);
  await sql`DELETE FROM events WHERE id = ${victim}::uuid`.execute(database.db);
  const { rows: after } = await sql<{ event_id: string | null }>`SELECT event_id FROM webhook_deliveries WHERE id = ${before[0]!.id}::uuid`.execute(database.db);
  assert.deepEqual(after, [{ event_id: null }]);
  const { rows: indexes } = await sql<{ indexname: string }>`
    SELECT indexname FROM pg_indexes WHERE tablename = 'webhook_deliveries' AND indexdef LIKE '%(event_id%' ORDER BY indexname`.execute(database.db);
  assert.deepEqual(indexes.map((i) => i.indexname), ['webhook_deliveries_event_id_webhook_id_key'], 'one index leads with event_id');
});

test('deleting a team still deletes its deliveries, through its webhooks (no foreign key of their own to teams)', async () => {
  const other = await makeTeam(database.db);
  const { rows: hook } = await sql<{ id: string }>`
    INSERT INTO webhooks (team_id, url, events, secret_enc)
    VALUES (${other.teamId}::uuid, 'http://127.0.0.1:9/', ARRAY['email.contact.saved'], '\\x00'::bytea) RETURNING id`.execute(database.db);
  await sql`
    WITH e AS (INSERT INTO events (team_id, name, payload) SELECT ${other.teamId}::uuid, 'contact.saved', '{}'::jsonb FROM generate_series(1, 5) RETURNING id)
    INSERT INTO webhook_deliveries (id, team_id, webhook_id, event_id, event)
    SELECT plover_uuid_v7(), ${other.teamId}::uuid, ${hook[0]!.id}::uuid, e.id, 'email.contact.saved' FROM e`.execute(database.db);
  const count = async (id: string) =>
    (await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE team_id = ${id}::uuid`.execute(database.db)).rows[0]!.n;
  assert.equal(await count(other.teamId), 5);
  await sql`DELETE FROM teams WHERE id = ${other.teamId}::uuid`.execute(database.db);
  assert.equal(await count(other.teamId), 0, "the deleted team's deliveries are gone");
  assert.equal(await count(teamId), ROWS, "another team's deliveries are untouched");
});
