// A decider that finds its team's waiting events held by another transaction
// keeps looking only for a while (10 s), then fails its job, which is retried:
// a holder that never lets go (a session stuck in its transaction after a
// database restart) must not keep a worker slot spinning for ever, nor keep a
// shutting-down job runner waiting for that job.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { createCampaign, drain, sendLog, setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';

describe('decider: waiting events held by another transaction', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    t = await buildTestApp();
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  test('gives up after 10 s with a retried error; decided once the holder lets go', { timeout: 60_000 }, async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const holder = await t.database.pool.connect();
    try {
      const up = await s.a.post('/email/contacts/upsert', { email: 'held@example.com' });
      assert.equal(up.statusCode, 200, up.body);
      await holder.query('BEGIN');
      // The lock a decider or a job marking its events processed holds (the weakest that makes the decider skip a row).
      const held = await holder.query('SELECT id FROM events WHERE team_id = $1 AND decided_at IS NULL FOR NO KEY UPDATE', [s.teamId]);
      assert.equal(held.rowCount, 1);
      const started = Date.now();
      await drain(t);
      const took = Date.now() - started;
      // The failure is written by the runner as the job ends; read it once it is there.
      let jobs: { last_error: string; attempts: number }[] = [];
      for (let i = 0; i < 100; i++) {
        ({ rows: jobs } = await t.database.pool.query<{ last_error: string; attempts: number }>(
          `SELECT j.last_error, j.attempts FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
            WHERE k.identifier = 'process_events'`));
        if (jobs.length !== 1 || jobs[0]!.last_error) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(jobs.length, 1, 'the job failed and waits for its retry');
      assert.match(jobs[0]!.last_error, /held by another transaction for over 10000 ms; retried later/);
      assert.ok(took >= 10_000 && took < 30_000, `gave up after ${took} ms`);
      assert.equal((await sendLog(t, s.teamId)).length, 0);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    // The retry (made due now) decides the event and sends.
    await t.database.pool.query(`UPDATE graphile_worker._private_jobs SET run_at = now()`);
    await drain(t);
    const log = await sendLog(t, s.teamId);
    assert.deepEqual(log.map((l) => [l.email, l.status]), [['held@example.com', 'sent']]);
  });
});
