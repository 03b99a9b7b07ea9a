// kill -9 of the worker in the middle of a broadcast: after restarts, nobody
// got two copies, and every recipient without one is a message that was in an
// SMTP transaction at a kill (failed, "interrupted", never resent). 2,000
// recipients here (the shared 2-core CI machine); the 20,000 run is the same
// test with BROADCAST_CRASH_CONTACTS=20000.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { closeTransports } from '../../src/mail/send.ts';
import { api, insertAccount, createTemplate } from '../engine/fixtures.ts';
import { buildTestApp, makeTeam, type TestApp, until } from '../helpers.ts';
import { startFaultSmtp, type FaultSmtp } from './smtp.ts';

const root = join(import.meta.dirname, '..', '..');
const CONTACTS = Number(process.env.BROADCAST_CRASH_CONTACTS ?? 2000);
/** Waits scale with the size: about 40 e-mails/s on a loaded 2-core machine. */
const WAIT_MS = Math.max(120_000, CONTACTS * 60);

describe('broadcast crash', () => {
  let t: TestApp;
  let smtp: FaultSmtp;
  let worker: ChildProcess | undefined;
  before(async () => {
    t = await buildTestApp({ config: { allowedPrivateTargets: ['127.0.0.1'], rateLimitPerMinute: 100_000 } });
    smtp = await startFaultSmtp({ dataDelayMs: 5 });
  });
  after(async () => {
    worker?.kill('SIGKILL');
    closeTransports();
    await smtp.close();
    await t.close();
  });

  test(`kill -9 of the worker twice during a ${CONTACTS}-recipient broadcast: nobody gets two copies`, { timeout: WAIT_MS * 3 }, async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    const accountId = await insertAccount(t, teamId, smtp.port, { daily_limit: 1_000_000 });
    const templateId = await createTemplate(a);
    for (let i = 0; i < CONTACTS; i += 1000) {
      const res = await t.app.inject({
        method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': key },
        payload: { contacts: Array.from({ length: Math.min(1000, CONTACTS - i) }, (_, j) => ({ email: `b${i + j}@crash.example.com` })) },
      });
      assert.equal(res.statusCode, 200, res.body);
    }
    const spawnWorker = () => {
      worker = spawn(process.execPath, ['src/worker.ts'], {
        cwd: root,
        env: { ...process.env, DATABASE_URL: t.database.url, WORKER_DEAD_AFTER_S: '3', WORKER_CONCURRENCY: '10', SEND_RETRY_DELAYS: '1', LOG_LEVEL: 'silent' },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
    };
    const killAt = async (received: number) => {
      await until(`${received} messages`, async () => smtp.total() >= received, WAIT_MS);
      const w = worker!;
      w.kill('SIGKILL');
      await new Promise((r) => w.once('exit', r));
      spawnWorker();
    };
    spawnWorker();
    const res = await a.post('/email/campaigns', { name: 'Crash', campaign_type: 'broadcast', template_ids: [templateId], mail_account_ids: [accountId] });
    assert.equal(res.statusCode, 201, res.body);
    const campaignId = res.json().campaign.id;
    await killAt(Math.floor(CONTACTS * 0.2));
    await killAt(Math.floor(CONTACTS * 0.6));

    const statuses = async () => {
      const { rows } = await t.database.pool.query<{ status: string; n: number }>(
        'SELECT status, count(*)::int AS n FROM email_send_log WHERE team_id = $1 GROUP BY status', [teamId]);
      return Object.fromEntries(rows.map((r) => [r.status, r.n])) as Record<string, number>;
    };
    let last: Record<string, number> = {};
    await until('every message to be attempted', async () => {
      const s = (last = await statuses());
      return (s.sent ?? 0) + (s.sending ?? 0) === CONTACTS && s;
    }, WAIT_MS).catch(async (err: Error) => {
      // What was left, and why: the statuses and the jobs not yet done.
      const jobs = await t.database.pool.query(
        `SELECT t.identifier, j.attempts, j.last_error, j.locked_by IS NOT NULL AS locked, j.run_at > now() AS later, count(*)::int AS n
           FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id GROUP BY 1, 2, 3, 4, 5`);
      const failed = await t.database.pool.query(
        `SELECT last_error, count(*)::int AS n FROM email_send_log WHERE team_id = $1 AND status = 'failed' GROUP BY 1`, [teamId]);
      throw new Error(`${err.message}: ${JSON.stringify(last)}; failed ${JSON.stringify(failed.rows)}; jobs ${JSON.stringify(jobs.rows)}`);
    });
    // The lease running out, without waiting for it: interrupted rows become older than the lease; their jobs fail them.
    const interrupted = (await t.database.pool.query<{ id: string }>(
      `UPDATE email_send_log SET updated_at = now() - interval '1 hour' WHERE team_id = $1 AND status = 'sending' RETURNING id`, [teamId])).rows.map((r) => r.id);
    await until('interrupted sends to be failed', async () => !(await statuses()).sending, 60_000);
    await until('the send to complete', async () => {
      const c = (await a.get(`/email/campaigns/${campaignId}`)).json().campaign;
      return c.campaign_sends[0].status === 'completed';
    }, 60_000);
    worker!.kill('SIGKILL');

    const { rows } = await t.database.pool.query<{ id: string; contact_id: string; status: string; last_error: string | null }>(
      'SELECT id, contact_id, status, last_error FROM email_send_log WHERE team_id = $1', [teamId]);
    assert.equal(rows.length, CONTACTS, 'one message per recipient');
    assert.equal(new Set(rows.map((r) => r.contact_id)).size, CONTACTS, 'every recipient listed once');
    assert.deepEqual([...smtp.counts].filter(([, n]) => n > 1), [], 'no message reached the SMTP server twice');
    for (const r of rows) {
      if (r.status === 'sent') assert.equal(smtp.counts.get(`${r.id}@plover.test`), 1);
      else {
        assert.equal(r.status, 'failed');
        assert.ok(interrupted.includes(r.id));
        assert.match(r.last_error ?? '', /interrupted/);
      }
    }
    const neverSent = interrupted.filter((id) => !smtp.counts.has(`${id}@plover.test`));
    // At most the account's 5 pooled connections per kill were in an SMTP transaction without the message arriving.
    assert.ok(neverSent.length <= 2 * 5, `${neverSent.length} interrupted sends never reached SMTP`);
    process.stderr.write(`broadcast crash: ${CONTACTS} recipients, ${smtp.total()} at SMTP, ${interrupted.length} interrupted (${neverSent.length} never reached SMTP)\n`);
  });
});
