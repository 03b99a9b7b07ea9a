// A worker killed with kill -9 leaves its graphile-worker jobs locked (for
// graphile-worker's 4-hour expiry). The heartbeat of a live worker unlocks the
// jobs of a process that stopped beating, so they run within WORKER_DEAD_AFTER_S.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { startWorker, type WorkerHandle } from '../../src/background.ts';
import { createTestDatabase, makeTeam, testConfig, type TestDatabase } from '../helpers.ts';

describe('worker heartbeat', () => {
  let database: TestDatabase;
  let worker: WorkerHandle | undefined;
  before(async () => {
    database = await createTestDatabase();
  });
  after(async () => {
    await worker?.stop();
    await database.drop();
  });

  test("a dead process's locked jobs are unlocked and run; a live one's are left alone", async () => {
    const { pool, db } = database;
    const { teamId } = await makeTeam(db);
    // Two events with their process_events jobs, both locked: one by a process
    // whose last heartbeat is a minute old, one by a process still beating.
    const { rows: events } = await pool.query(
      `INSERT INTO events (team_id, name, payload) VALUES ($1, 'contact.saved', '{}'), ($1, 'contact.saved', '{}') RETURNING id`,
      [teamId],
    );
    const [dead, live] = events.map((e) => e.id as string);
    for (const [id, lockedBy] of [[dead, 'pool-dead'], [live, 'pool-live']] as const) {
      await pool.query(`SELECT graphile_worker.add_job('process_events', json_build_object('event_ids', ARRAY[$1::uuid]))`, [id]);
      await pool.query(
        `UPDATE graphile_worker._private_jobs SET locked_at = now(), locked_by = $1
          WHERE locked_by IS NULL AND payload->'event_ids'->>0 = $2`,
        [lockedBy, id],
      );
    }
    await pool.query(
      `INSERT INTO worker_processes (id, worker_ids, heartbeat_at) VALUES
         ('dead-host:1', '{pool-dead}', now() - interval '1 minute'),
         ('live-host:2', '{pool-live}', now())`,
    );
    const config = testConfig({ workerDeadAfterS: 3 });
    worker = await startWorker(pool, { db, config }, pino({ level: 'silent' }));
    const processed = async (id: string) =>
      (await pool.query('SELECT processed_at IS NOT NULL AS done FROM events WHERE id = $1', [id])).rows[0].done as boolean;
    const deadline = Date.now() + 15_000;
    while (!(await processed(dead)) && Date.now() < deadline) await sleep(100);
    assert.equal(await processed(dead), true, "the dead process's job ran");
    assert.equal(await processed(live), false, "the live process's job is still its own");
    const { rows } = await pool.query(`SELECT id FROM worker_processes ORDER BY id`);
    assert.ok(!rows.some((r) => r.id === 'dead-host:1'), 'the dead process was removed');
    assert.ok(rows.some((r) => r.id === 'live-host:2'));
  });
});
