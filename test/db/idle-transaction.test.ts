// A session left idle inside a transaction (a client stuck after a database
// outage) is ended by PostgreSQL after the pool's limit, and its row locks are
// released: nobody waits on them for good.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createPool, IDLE_IN_TRANSACTION_MS } from '../../src/db/pool.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

let d: TestDatabase;
before(async () => {
  d = await createTestDatabase();
});
after(() => d.drop());

test('every pooled session has the limit (60 s by default)', async () => {
  // In milliseconds whatever the server's display unit.
  const { rows } = await d.pool.query<{ ms: number }>(
    `SELECT setting::int AS ms FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'`);
  assert.equal(rows[0]!.ms, IDLE_IN_TRANSACTION_MS);
});

test('a session idle in its transaction past the limit is ended and its locks released', async () => {
  const pool = createPool(d.url, 2, { idleInTransactionMs: 500 });
  const other = createPool(d.url, 1);
  try {
    const { teamId } = await makeTeam(d.db);
    const stuck = await pool.connect();
    await stuck.query('BEGIN');
    await stuck.query('SELECT id FROM teams WHERE id = $1 FOR UPDATE', [teamId]);
    await sleep(1_500);
    // The lock is gone: another session takes it at once.
    const c = await other.connect();
    try {
      await c.query(`SET lock_timeout = '2s'`);
      const r = await c.query('SELECT id FROM teams WHERE id = $1 FOR UPDATE', [teamId]);
      assert.equal(r.rowCount, 1);
    } finally {
      c.release();
    }
    // The stuck session was ended: its next statement fails.
    await assert.rejects(stuck.query('SELECT 1'));
    stuck.release(true);
  } finally {
    await pool.end();
    await other.end();
  }
});
