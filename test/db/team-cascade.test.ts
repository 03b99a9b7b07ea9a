// Every table with a team_id loses its rows with the team. A table either has
// its own foreign key to teams (ON DELETE CASCADE), or a NOT NULL foreign key
// with ON DELETE CASCADE to a table that does, directly or in turn: migration
// 0031 dropped the team keys that such a parent already implied, because each
// cost a check and a lock on the team's row per row inserted. This test holds
// the schema to that rule, so a table added later cannot be left behind.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../helpers.ts';

let database: TestDatabase;
before(async () => {
  database = await createTestDatabase();
});
after(() => database.drop());

type Key = { tbl: string; ref: string; cols: string[]; cascade: boolean; not_null: boolean };

test('every table with a team_id is deleted with its team, by its own key or a NOT NULL cascading parent', async () => {
  const { rows: tables } = await database.pool.query<{ table_name: string }>(`
    SELECT c.table_name FROM information_schema.columns c
    JOIN information_schema.tables t USING (table_schema, table_name)
    WHERE c.table_schema = 'public' AND c.column_name = 'team_id' AND t.table_type = 'BASE TABLE'`);
  const { rows: keys } = await database.pool.query<Key>(`
    SELECT k.conrelid::regclass::text AS tbl, k.confrelid::regclass::text AS ref, k.confdeltype = 'c' AS cascade,
           ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)) AS cols,
           (SELECT bool_and(a.attnotnull) FROM pg_attribute a WHERE a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)) AS not_null
    FROM pg_constraint k WHERE k.contype = 'f' AND k.connamespace = 'public'::regnamespace`);
  assert.ok(tables.length > 20, `${tables.length} tables with a team_id`);
  const goesWithTeam = (tbl: string, seen = new Set<string>()): boolean => {
    if (seen.has(tbl)) return false;
    seen.add(tbl);
    return keys.some(
      // A NOT NULL key that deletes the row with its parent: teams itself (by the
      // row's team_id), or a table that goes with its team in turn.
      (k) => k.tbl === tbl && k.cascade && k.not_null && (k.ref === 'teams' ? k.cols.join() === 'team_id' : goesWithTeam(k.ref, seen)),
    );
  };
  const left = tables.map((t) => t.table_name).filter((t) => !goesWithTeam(t));
  assert.deepEqual(left, [], 'tables whose rows would outlive their team');
  // The three whose own key 0031 dropped are covered through their parents.
  for (const t of ['webhook_deliveries', 'campaign_decisions', 'tracking_hits']) {
    assert.ok(!keys.some((k) => k.tbl === t && k.ref === 'teams'), `${t} has no key of its own to teams`);
    assert.ok(goesWithTeam(t), t);
  }
});
