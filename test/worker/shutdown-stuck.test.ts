// A job runner that shuts down after a fatal error (a complete-job write that
// failed, as in a database outage) waits for its running jobs. One job stuck
// for good must not keep every job of the process stopped: past twice
// WORKER_DEAD_AFTER_S the runner is abandoned and replaced, and new jobs run.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { startWorker, type WorkerHandle } from '../../src/background.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp, until } from '../helpers.ts';
import { setup } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';

describe('job runner: a shutdown stuck on a job', () => {
  let t: TestApp;
  let sink: CaptureSink;
  let worker: WorkerHandle | undefined;
  before(async () => {
    t = await buildTestApp();
    sink = await startCaptureSink();
  });
  after(async () => {
    await worker?.stop();
    closeTransports();
    await sink.close();
    await t.close();
  });

  test('is abandoned and replaced; new jobs run while the stuck one still waits', { timeout: 90_000 }, async () => {
    const { pool } = t.database;
    const s = await setup(t, sink.port);
    // The stuck job: a contact.saved's process_events job (a webhook subscribes,
    // no campaign listens), whose fan-out's insert waits for the webhook row's
    // lock (its foreign-key check), held here.
    const hook = await s.a.post('/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.contact.saved'] });
    assert.equal(hook.statusCode, 201, hook.body);
    const holder = await pool.connect();
    const lines: string[] = [];
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM webhooks WHERE id = $1 FOR UPDATE', [hook.json().webhook.id]);
      const up = await s.a.post('/email/contacts/upsert', { email: 'stuck@example.com' });
      assert.equal(up.statusCode, 200, up.body);
      const log = pino({ level: 'error' }, { write: (line: string) => void lines.push(line) });
      worker = await startWorker(pool, { db: t.database.db, config: testConfig({ workerDeadAfterS: 1, workerConcurrency: 2 }) }, log);
      await until('the job to wait for the lock', async () =>
        (await pool.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rowCount! > 0, 20_000);

      // The fatal error: completing this job fails, so the runner shuts down (and waits for the stuck job).
      await pool.query(`
        CREATE OR REPLACE FUNCTION public.plover_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'completion refused'; END $$;
        CREATE TRIGGER plover_test_refuse BEFORE DELETE ON graphile_worker._private_jobs
          FOR EACH ROW WHEN (OLD.payload::jsonb ? 'poison') EXECUTE FUNCTION public.plover_test_refuse()`);
      await pool.query(`SELECT graphile_worker.add_job('process_events', '{"event_ids": [], "poison": true}'::json)`);
      await until('the runner to be abandoned', async () => lines.some((l) => l.includes('did not finish shutting down')), 30_000);
      await pool.query(`DROP TRIGGER plover_test_refuse ON graphile_worker._private_jobs; DROP FUNCTION public.plover_test_refuse()`);

      // A new event of another team is processed while the stuck job still waits.
      const other = await makeTeam(t.database.db);
      const { rows } = await pool.query(`INSERT INTO events (team_id, name, payload) VALUES ($1, 'contact.saved', '{}') RETURNING id`, [other.teamId]);
      const id = rows[0].id as string;
      await pool.query(`SELECT graphile_worker.add_job('process_events', json_build_object('event_ids', ARRAY[$1::uuid]))`, [id]);
      await until('the new event to be processed', async () =>
        (await pool.query('SELECT processed_at IS NOT NULL AS done FROM events WHERE id = $1', [id])).rows[0].done, 20_000);
      assert.equal((await pool.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rowCount! > 0, true,
        'the stuck job was still waiting');
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
    }
  });
});
