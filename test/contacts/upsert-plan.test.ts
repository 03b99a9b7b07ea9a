import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { toPatches, upsertStatement } from '../../src/contacts/queries.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

type PlanNode = {
  'Relation Name'?: string;
  'Node Type': string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
};

/** Rows of `contacts` the statement's scans looked at: returned plus filtered out, over every loop. */
function contactRowsExamined(node: PlanNode): number {
  let n = 0;
  if (node['Relation Name'] === 'contacts' && /Scan/.test(node['Node Type'])) {
    n += (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0)) * node['Actual Loops'];
  }
  for (const child of node.Plans ?? []) n += contactRowsExamined(child);
  return n;
}

// The import grows a team from nothing in one go, so the planner's statistics
// describe a much smaller team than the one the statement runs against. The
// bulk upsert must still look contacts up by (team_id, email), not scan the
// team: a scan made each batch of 1,000 cost 52 ms at 20,000 rows, 201 ms at
// 200,000 (a 1,000,000-row import ran at 0.82 of the API's rate).
describe('bulk upsert plan: lookups stay per address as the team outgrows its statistics', () => {
  let d: TestDatabase;
  before(async () => {
    d = await createTestDatabase();
    // Statistics only when the test takes them: autovacuum would refresh them at
    // a moment of its own choosing.
    await d.pool.query('ALTER TABLE contacts SET (autovacuum_enabled = false)');
  });
  after(() => d.drop());

  // The statement runs prepared (src/db/pool.ts), so from its sixth run on a
  // connection PostgreSQL may use its generic plan, which knows no team: that
  // plan must look addresses up too. Forced here, so both plans are checked.
  for (const plan of ['custom', 'generic'] as const)
  test(`rows examined per batch of 1,000 do not grow with the team (4x the team, < 2x the rows), ${plan} plan`, async () => {
    const { teamId } = await makeTeam(d.db, `team ${plan}`);
    const other = await makeTeam(d.db, `other ${plan}`);
    await d.pool.query(`INSERT INTO contacts (team_id, email) SELECT $1, 'o' || g || '@other.io' FROM generate_series(1, 2000) g`, [other.teamId]);
    await d.pool.query('ANALYZE contacts'); // the team has no contacts yet: stale from here on
    const examined = async (size: number) => {
      await d.pool.query(
        `INSERT INTO contacts (team_id, email) SELECT $1, 'c' || g || '@x.io' FROM generate_series(1, $2::int) g ON CONFLICT DO NOTHING`,
        [teamId, size],
      );
      // Half the batch exists (to be updated), half is new.
      const patches = toPatches(Array.from({ length: 1000 }, (_, i) => ({ email: `c${size - 500 + i}@x.io`, first_name: 'N' })));
      const { sql, params } = upsertStatement(teamId, patches);
      const client = await d.pool.connect();
      try {
        await client.query('BEGIN');
        if (plan === 'custom') {
          const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, params);
          return contactRowsExamined(rows[0]['QUERY PLAN'][0].Plan as PlanNode);
        }
        await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
        await client.query(`PREPARE upsert_generic (uuid, jsonb, int) AS ${sql}`);
        // EXPLAIN EXECUTE takes no bound parameters: the values go in as literals.
        const [team, body, cap] = params as [string, string, number];
        const { rows } = await client.query(
          `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE upsert_generic (${client.escapeLiteral(team)}, ${client.escapeLiteral(body)}, ${Number(cap)})`);
        return contactRowsExamined(rows[0]['QUERY PLAN'][0].Plan as PlanNode);
      } finally {
        await client.query('ROLLBACK');
        await client.query('DEALLOCATE ALL');
        client.release();
      }
    };
    const small = await examined(10_000);
    const large = await examined(40_000);
    assert.ok(small > 0, 'the plan reports its scans of contacts');
    assert.ok(large < 2 * small, `rows examined grew from ${small} to ${large} when the team grew 4x`);
  });
});

// A single contact's upsert (the API's most common write) on a table of a few
// thousand contacts, statistics fresh: the input's size class (a LIMIT of 1)
// tells the planner one row comes in, so it probes the (team_id, email) index.
// Estimated at jsonb_array_elements()'s default 100 rows, it hashed the input
// and read every row of the table (every team's) in the UPDATE and in `pre`:
// 2 ms a single upsert at 2,000 rows, more as the table grew.
describe('single upsert plan: one contact is looked up, not the table scanned', () => {
  let d: TestDatabase;
  before(async () => {
    d = await createTestDatabase();
  });
  after(() => d.drop());

  for (const plan of ['custom', 'generic'] as const)
  test(`a one-contact upsert examines a few rows of a 3,000-row table, ${plan} plan`, async () => {
    const { teamId } = await makeTeam(d.db, `single ${plan}`);
    const other = await makeTeam(d.db, `neighbour ${plan}`);
    await d.pool.query(`INSERT INTO contacts (team_id, email) SELECT $1, 'n' || g || '@other.io' FROM generate_series(1, 2000) g`, [other.teamId]);
    await d.pool.query(`INSERT INTO contacts (team_id, email) SELECT $1, 'c' || g || '@x.io' FROM generate_series(1, 1000) g`, [teamId]);
    await d.pool.query('ANALYZE contacts');
    for (const email of ['c500@x.io', 'new@x.io']) {
      const { sql, params } = upsertStatement(teamId, toPatches([{ email, first_name: 'Changed', tags: ['t'] }]));
      const client = await d.pool.connect();
      try {
        await client.query('BEGIN');
        let rows;
        if (plan === 'custom') {
          ({ rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, params));
        } else {
          await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
          await client.query(`PREPARE upsert_one (uuid, jsonb, int) AS ${sql}`);
          const [team, body, cap] = params as [string, string, number];
          ({ rows } = await client.query(
            `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE upsert_one (${client.escapeLiteral(team)}, ${client.escapeLiteral(body)}, ${Number(cap)})`));
        }
        const examined = contactRowsExamined(rows[0]['QUERY PLAN'][0].Plan as PlanNode);
        assert.ok(examined <= 10, `${email}: ${examined} contact rows examined for one contact`);
      } finally {
        await client.query('ROLLBACK');
        // Only this test's statement: node-postgres keeps track of the ones it prepared on the connection.
        if (plan === 'generic') await client.query('DEALLOCATE upsert_one');
        client.release();
      }
    }
  });
});
