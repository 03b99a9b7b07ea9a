// Date parameters reach PostgreSQL as the instant they hold, whatever the
// process's time zone (src/db/pool.ts sets pg to write them in UTC): in a
// zone whose old dates carry a local mean time offset with seconds, pg wrote
// the offset cut to whole minutes and the instant moved by seconds.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { createDb, createPool } from '../../src/db/pool.ts';
import { createTestDatabase, type TestDatabase } from '../helpers.ts';

let d: TestDatabase;
before(async () => {
  d = await createTestDatabase();
});
after(() => d.drop());

test('a Date of year 1, 1 BC or 10000 is stored as the same instant in a time zone with a seconds offset', async () => {
  const pool = createPool(d.url, 1);
  const db = createDb(pool);
  const zone = process.env.TZ;
  try {
    // New York's local mean time before 1883: -04:56:02.
    process.env.TZ = 'America/New_York';
    for (const at of ['0001-01-01T00:00:00.000Z', '0000-06-01T12:00:00.000Z', '+010000-01-01T15:58:59.123Z', '2030-07-01T00:00:00.500Z']) {
      const date = new Date(at);
      const { rows } = await sql<{ ms: string }>`SELECT (extract(epoch FROM ${date}::timestamptz) * 1000)::bigint::text AS ms`.execute(db);
      assert.equal(Number(rows[0]!.ms), date.getTime(), at);
    }
  } finally {
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
    await db.destroy();
  }
});
