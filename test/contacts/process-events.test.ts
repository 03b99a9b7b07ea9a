import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { runOnce } from 'graphile-worker';
import { buildTaskList } from '../../src/tasks.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';

describe('process_events: the worker picks up emitted events', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  test('events committed by an upsert are processed by the worker and marked processed', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    // A webhook subscribed and no campaign: jobs for the fan-out (a campaign's triggers wait for the decider loop instead).
    await createWebhook(t.database.db, webhookSecretBox(testConfig().appSecret), teamId, { url: 'https://hooks.example.com/p', events: ['email.contact.saved'] });
    const contacts = Array.from({ length: 700 }, (_, i) => ({ email: `w${i}@x.io` }));
    const res = await t.app.inject({
      method: 'POST',
      url: '/public/v1/email/contacts/bulk-upsert',
      headers: { 'x-api-key': key },
      payload: { contacts },
    });
    assert.equal(res.statusCode, 200);
    const pending = async () =>
      Number((await t.database.pool.query('SELECT count(*) FROM events WHERE team_id = $1 AND processed_at IS NULL', [teamId])).rows[0].count);
    assert.equal(await pending(), 700);
    const taskList = buildTaskList({ db: t.database.db, config: testConfig() });
    const left = async () =>
      (await t.database.pool.query(
        `SELECT j.attempts, j.max_attempts, j.last_error FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
          WHERE k.identifier = 'process_events'`,
      )).rows as { attempts: number; max_attempts: number; last_error: string | null }[];
    await runOnce({ pgPool: t.database.pool, taskList, concurrency: 2 });
    // Two jobs at once may collide (a CI run left one job to its retry with every
    // event processed): a retried job must then complete, as the worker would run it.
    for (let round = 0; round < 3 && (await left()).length > 0; round++) {
      await t.database.pool.query('UPDATE graphile_worker._private_jobs SET run_at = now()');
      await runOnce({ pgPool: t.database.pool, taskList, concurrency: 2 });
    }
    assert.equal(await pending(), 0);
    const { rows: [fanned] } = await t.database.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE team_id = $1', [teamId]);
    assert.equal(fanned.n, 700, 'each event fanned out to the webhook');
    const jobs = await left();
    assert.equal(jobs.length, 0, `every job completed: ${JSON.stringify(jobs)}`);
  });
});
