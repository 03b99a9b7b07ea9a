// Statements marked PREPARED (src/db/pool.ts) run as named prepared statements:
// parsed and planned once per connection, then run from PostgreSQL's plan cache
// (a generic plan after five executions); unmarked statements are left alone.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
import { createDb, createPool, PREPARED } from '../../src/db/pool.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

let d: TestDatabase;
before(async () => {
  d = await createTestDatabase();
});
after(() => d.drop());

type Prepared = { name: string; statement: string; generic_plans: number; custom_plans: number };

test('a marked statement is prepared once per connection and then runs on a cached plan; an unmarked one is not', async () => {
  // One connection, so every statement below runs in the same session.
  const pool = createPool(d.url, 1);
  const db = createDb(pool);
  try {
    const { teamId } = await makeTeam(d.db);
    const { teamId: other } = await makeTeam(d.db, 'Other team');
    for (let i = 0; i < 8; i++) {
      const id = i % 2 === 0 ? teamId : other;
      const { rows } = await sql<{ name: string }>`${sql.raw(PREPARED)}
        SELECT name FROM teams WHERE id = ${id}`.execute(db);
      assert.deepEqual(rows.map((r) => r.name), [i % 2 === 0 ? 'Test team' : 'Other team'], 'the prepared statement answers with this run\'s values');
    }
    await sql`SELECT id FROM teams WHERE id = ${teamId}`.execute(db);
    const { rows } = await sql<Prepared>`
      SELECT name, statement, generic_plans::int, custom_plans::int FROM pg_prepared_statements`.execute(db);
    assert.equal(rows.length, 1, `prepared in this session: ${JSON.stringify(rows.map((r) => r.statement))}`);
    const [p] = rows;
    assert.match(p!.name, /^plover_/);
    assert.ok(p!.statement.startsWith(PREPARED));
    // Parsed once, executed eight times; from the sixth on, PostgreSQL's plan cache
    // offers the generic plan, which it takes unless it is costlier than planning anew.
    assert.equal(p!.generic_plans + p!.custom_plans, 8);
    assert.ok(p!.generic_plans >= 1, `generic plans: ${p!.generic_plans}`);
  } finally {
    await db.destroy();
  }
});

test('a wrapper installed on pg.Client#query after a connection was made still sees marked statements', async () => {
  const pool = createPool(d.url, 1);
  const db = createDb(pool);
  // oxlint-disable-next-line typescript/unbound-method -- restored below, called with .apply(this)
  const original = pg.Client.prototype.query;
  try {
    await sql`SELECT 1`.execute(db); // the connection exists before the wrapper
    const seen: unknown[] = [];
    (pg.Client.prototype as { query: unknown }).query = function (this: pg.Client, ...args: unknown[]) {
      seen.push(args[0]);
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    };
    await sql`${sql.raw(PREPARED)} SELECT 2 AS two`.execute(db);
    assert.ok(seen.some((q) => typeof q === 'object' && q !== null && (q as { name?: string }).name?.startsWith('plover_')));
  } finally {
    pg.Client.prototype.query = original;
    await db.destroy();
  }
});
