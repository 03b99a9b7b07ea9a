// PostgreSQL stopped under load (pg_ctl stop -m immediate: to clients, a crash)
// and started again on the same port a few seconds later, on a dedicated server
// the test owns (so stopping it disturbs no other test). The API runs in this
// process (buildApp on 127.0.0.1), the worker as its own process. Promised:
// answers during the outage are fast 503 SERVICE_UNAVAILABLE with the error
// envelope (never a hang, never a 500); the service recovers without a restart;
// every write answered 2xx is stored; the worker process survives (also with a
// job finishing while the database is down), processes every event once the
// database is back, and does not send twice the e-mail that was in flight.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import { startEmbedded, type EmbeddedDatabase } from '../../src/db/embedded.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createDb, createPool, type Db } from '../../src/db/pool.ts';
import type pg from 'pg';
import { listeningCampaign, makeTeam, testConfig } from '../helpers.ts';
import { startFaultSmtp, type FaultSmtp } from './smtp.ts';

const root = join(import.meta.dirname, '..', '..');
// Enough load to see every kind of answer, light enough not to starve the
// other test files running next to this one on a 2-core CI machine.
const CLIENTS = 4;
const OUTAGE_MS = 4_000;
// An answer slower than this during the outage counts as a hang.
const FAST_MS = 3_000;

type Answer = { kind: 'write' | 'read' | 'ready'; email?: string; start: number; end: number; status: number; body: any };

describe('database outage under load', () => {
  let dataDir: string;
  let pgServer: EmbeddedDatabase;
  let port: number;
  let pool: pg.Pool;
  let db: Db;
  let app: FastifyInstance;
  let worker: ChildProcess | undefined;
  let workerExit: number | string | null = null;
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => void unhandled.push(err);
  let origin: string;
  let smtp: FaultSmtp;

  before(async () => {
    // Holds each DATA answer 2 s: a send is mid-transaction when the database stops.
    smtp = await startFaultSmtp({ dataDelayMs: 2_000 });
    dataDir = mkdtempSync(join(tmpdir(), 'plover-dbfault-'));
    pgServer = await startEmbedded({ dataDir });
    port = Number(new URL(pgServer.url).port);
    pool = createPool(pgServer.url, 20);
    db = createDb(pool);
    await migrate(pool);
    const config = testConfig({ databaseUrl: pgServer.url, rateLimitPerMinute: 1_000_000 });
    app = await buildApp({ config, pool, db });
    await app.listen({ port: 0, host: '127.0.0.1' });
    origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    process.on('unhandledRejection', onUnhandled);
    // The worker in its own process, as deployed: an unhandled rejection there
    // ends the process (close-with-grace), which this test would see.
    worker = spawn(process.execPath, ['src/worker.ts'], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: pgServer.url, WORKER_DEAD_AFTER_S: '3', LOG_LEVEL: process.env.FAULT_LOG ?? 'silent' },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    worker.on('exit', (code, signal) => (workerExit = signal ?? code));
    // Up once its first heartbeat is written (after migrations and the runner start).
    for (let i = 0; (await pool.query('SELECT 1 FROM worker_processes')).rowCount === 0; i++) {
      if (i > 300 || workerExit !== null) throw new Error(`the worker did not start (${workerExit})`);
      await sleep(100);
    }
  });

  after(async () => {
    process.off('unhandledRejection', onUnhandled);
    if (worker && worker.exitCode === null && worker.signalCode === null) {
      worker.kill('SIGKILL');
      await new Promise((r) => worker!.once('exit', r));
    }
    await app?.close();
    await db?.destroy().catch(() => {});
    if (pool && !pool.ended) await pool.end().catch(() => {});
    await pgServer?.stop().catch(() => {});
    await smtp?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('answers fast 503s during the outage, recovers by itself, loses no acknowledged write', { timeout: 120_000 }, async () => {
    const { key, teamId } = await makeTeam(db);
    // A campaign on contact.saved (no send: it sends nothing), so the upserts'
    // events get their process_events jobs, which the outage must not lose.
    await listeningCampaign(db, teamId, ['contact.saved']);
    // A campaign on lead.created whose one send is in flight (the SMTP server
    // holding DATA) when the database stops: its job then completes with the
    // database down, the case that used to end the worker process.
    const account = await db.insertInto('mail_accounts').values({
      team_id: teamId, host: '127.0.0.1', port: smtp.port, security: 'none', from_email: 'news@plover.test', daily_limit: 100, status: 'active',
    }).returning('id').executeTakeFirstOrThrow();
    const post = async (path: string, payload: unknown) => {
      const res = await fetch(origin + path, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(payload) });
      const text = await res.text();
      assert.ok(res.status < 300, `${path}: ${res.status} ${text}`);
      return JSON.parse(text);
    };
    const template = await post('/public/v1/email/templates', { name: 'T', content_type: 'html', subject: 'Hi', content: '<p>Hi</p>' });
    await post('/public/v1/email/campaigns', { name: 'C', events: ['lead.created'], template_ids: [template.template.id], mail_account_ids: [account.id] });
    const answers: Answer[] = [];
    let running = true;
    let n = 0;

    async function call(kind: Answer['kind'], path: string, payload?: unknown, email?: string): Promise<void> {
      const start = Date.now();
      let status = 0;
      let body: any;
      try {
        const res = await fetch(origin + path, {
          method: payload === undefined ? 'GET' : 'POST',
          headers: { 'x-api-key': key, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
          body: payload === undefined ? undefined : JSON.stringify(payload),
          // Far beyond FAST_MS: a hang shows up as a slow answer, not as a stuck test.
          signal: AbortSignal.timeout(15_000),
        });
        status = res.status;
        body = await res.json().catch(() => undefined);
      } catch (err) {
        body = { transport: (err as Error).message };
      }
      answers.push({ kind, email, start, end: Date.now(), status, body });
    }

    const clients = Array.from({ length: CLIENTS }, async (_, c) => {
      while (running) {
        const i = n++;
        if (c === 0 && i % 4 === 0) await call('ready', '/readyz');
        else if (i % 3 === 2) await call('read', `/public/v1/email/contacts/unsubscribes?search=w${i % 50}`);
        else {
          const email = `w${i}@dbfault.example.com`;
          await call('write', '/public/v1/email/contacts/upsert', { email, first_name: `N${i}` }, email);
        }
        await sleep(20);
      }
    });

    // The client loops run until `running` is false: stopped in `finally`, so a
    // failed step here ends the test instead of leaving them looping (a CI run
    // once hung 84 minutes on that).
    let stopAt: number, stoppedAt: number, startAt: number, upAt: number;
    try {
      await sleep(1_000);
      await post('/public/v1/email/events', { event_name: 'lead.created', email: 'lead@dbfault.example.com' });
      // Generous: on a loaded 2-core machine the worker's first send has taken over 10 s.
      for (let i = 0; smtp.started() === 0; i++) {
        if (i >= 600) {
          // Where it stopped: the message (if any) and the jobs not yet done.
          const sends = await pool.query('SELECT status, last_error FROM email_send_log WHERE team_id = $1', [teamId]);
          const jobs = await pool.query(
            `SELECT t.identifier, j.attempts, j.last_error, j.locked_by IS NOT NULL AS locked, j.run_at > now() AS later
               FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id`);
          assert.fail(`the send did not reach the SMTP server within 30 s: sends ${JSON.stringify(sends.rows)}; jobs ${JSON.stringify(jobs.rows)}`);
        }
        await sleep(50);
      }
      stopAt = Date.now();
      await pgServer.stop('immediate');
      stoppedAt = Date.now();
      await sleep(OUTAGE_MS);
      startAt = Date.now();
      pgServer = await startEmbedded({ dataDir, port });
      upAt = Date.now();
      // Recovery window: the service must be answering 2xx again well within it.
      await sleep(8_000);
    } finally {
      running = false;
      await Promise.all(clients);
    }

    const during = answers.filter((a) => a.start >= stoppedAt && a.end <= startAt);
    const failures = answers.filter((a) => a.status < 200 || a.status >= 300);
    const slow = answers.filter((a) => a.end - a.start > FAST_MS);
    const firstOkAfter = answers.filter((a) => a.start >= upAt && a.status >= 200 && a.status < 300).sort((a, b) => a.start - b.start)[0];
    const summary = {
      answers: answers.length, during_outage: during.length, failures: failures.length,
      statuses: Object.fromEntries([...new Set(answers.map((a) => a.status))].map((s) => [s, answers.filter((a) => a.status === s).length])),
      slowest_ms: Math.max(...answers.map((a) => a.end - a.start)),
      stop_ms: stoppedAt - stopAt, start_ms: upAt - startAt,
      recovered_after_ms: firstOkAfter ? firstOkAfter.start - upAt : null,
    };
    process.stderr.write(`database fault: ${JSON.stringify(summary)}\n`);

    assert.ok(during.length >= 20, `only ${during.length} requests were made during the outage`);
    assert.deepEqual(slow.map((a) => `${a.kind} ${a.status} ${a.end - a.start} ms`), [], 'every answer within 3 s');
    for (const a of failures) {
      assert.equal(a.status, 503, `${a.kind} answered ${a.status}: ${JSON.stringify(a.body)}`);
      assert.equal(a.body?.ok, false);
      assert.equal(a.body?.error?.code, 'SERVICE_UNAVAILABLE', JSON.stringify(a.body));
      assert.equal(typeof a.body?.error?.message, 'string');
    }
    assert.ok(during.every((a) => a.status === 503), 'every request made while the database was down is a 503');
    assert.ok(firstOkAfter && firstOkAfter.start - upAt < 5_000, `recovered ${summary.recovered_after_ms} ms after the database was back`);
    const tail = answers.filter((a) => a.start >= upAt + 5_000);
    assert.ok(tail.length > 20 && tail.every((a) => a.status >= 200 && a.status < 300), 'all answers 2xx once recovered');

    const acknowledged = answers.filter((a) => a.kind === 'write' && a.status === 200).map((a) => a.email!);
    const { rows } = await pool.query<{ email: string }>('SELECT email FROM contacts WHERE team_id = $1', [teamId]);
    const stored = new Set(rows.map((r) => r.email));
    assert.deepEqual(acknowledged.filter((e) => !stored.has(e)), [], 'every acknowledged write is stored');

    assert.deepEqual(unhandled.map(String), [], 'no unhandled rejection in the API process');
    // The worker process survived too, and the events of the stored writes all
    // get processed (jobs that failed during the outage are retried).
    assert.equal(workerExit, null, `the worker process exited (${workerExit})`);
    const deadline = Date.now() + 60_000;
    let pending = -1;
    while (Date.now() < deadline) {
      const r = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events WHERE team_id = $1 AND processed_at IS NULL', [teamId]);
      pending = r.rows[0].n;
      if (pending === 0) break;
      await sleep(250);
    }
    if (pending > 0) {
      const jobs = await pool.query(`SELECT * FROM graphile_worker.jobs`);
      process.stderr.write(`jobs left: ${JSON.stringify(jobs.rows)}\n`);
      // What each session of the database is doing (a stuck job waits on something).
      const activity = await pool.query(
        `SELECT pid, application_name, state, wait_event_type, wait_event, now() - xact_start AS xact_age, now() - state_change AS state_age, left(query, 300) AS query
           FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`);
      process.stderr.write(`sessions: ${JSON.stringify(activity.rows)}\n`);
    }
    assert.equal(pending, 0, 'events left unprocessed after the outage');
    // Each by its job (an event nobody listens to is recorded processed in its
    // own transaction: processed_at = created_at, both its now(); a job's
    // transaction has another start, even one before the write's, whose
    // commit a decider's later statement can still see).
    const saved = await pool.query<{ n: number; by_job: number }>(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE processed_at <> created_at)::int AS by_job
         FROM events WHERE team_id = $1 AND name = 'contact.saved'`, [teamId]);
    assert.ok(saved.rows[0]!.n > 20, `contact.saved events: ${saved.rows[0]!.n}`);
    assert.equal(saved.rows[0]!.by_job, saved.rows[0]!.n, 'every contact.saved processed by its job');
    // The interrupted send went out once and was not repeated by the restarted runner.
    await sleep(1_000);
    assert.equal(smtp.total(), 1, 'the send in flight during the outage reached SMTP once');
    assert.equal(workerExit, null, `the worker process exited (${workerExit})`);
  });
});
