// The background worker: started by main.ts inside `npm start`, or alone by
// `npm run worker` (src/worker.ts). A worker is graphile-worker (event processing and other jobs), the webhook
// delivery dispatcher, the campaign decider loop (trigger events), and a heartbeat that frees the jobs of dead workers.
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { run, Logger, type Runner, type WorkerEvents } from 'graphile-worker';
import { sql } from 'kysely';
import type pg from 'pg';
import pino from 'pino';
import { buildTaskList, decideOptions, type TaskDeps } from './tasks.ts';
import { CampaignDecider } from './campaigns/decider.ts';
import { BACKLOG_CRON } from './webhooks/backlog.ts';
import { closeTransports } from './mail/send.ts';
import { RETENTION_CRON } from './ops/retention.ts';
import { AUTO_DISABLE_CRON } from './webhooks/auto-disable.ts';
import { WebhookDispatcher } from './webhooks/dispatcher.ts';
import { IMAP_POLL_CRON } from './inbound/imap/poll.ts';
import { STATS_FOLD_CRON } from './stats/fold.ts';
import { ACCOUNT_HEALTH_CRON } from './stats/health.ts';

export type WorkerHandle = { readonly runner: Runner; dispatcher: WebhookDispatcher; stop(): Promise<void> };


export async function startWorker(pool: pg.Pool, deps: TaskDeps, log: pino.Logger): Promise<WorkerHandle> {
  const logger = new Logger((scope) => (level, message, meta) => {
    const l = level === 'warning' ? 'warn' : level;
    (log[l as 'info'] ?? log.info).call(log, { scope, ...meta }, message);
  });
  const processId = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  let currentPoolId: string | null = null;
  const workerIds = new Set<string>();
  const events: WorkerEvents = new EventEmitter();
  // graphile-worker 0.17 locks jobs with its pool's id (locked_by = 'pool-…'),
  // not the ids of the pool's workers: without the pool id, a dead process's
  // jobs stayed locked for graphile-worker's 4-hour expiry.
  events.on('pool:create', ({ workerPool }) => {
    workerIds.add(workerPool.id);
    currentPoolId = workerPool.id;
  });
  events.on('worker:create', ({ worker }) => workerIds.add(worker.workerId));
  // Six missed heartbeats make a worker dead (WORKER_DEAD_AFTER_S, default 30 s):
  // long enough for a GC pause or a slow database, short enough that a killed
  // worker's jobs are retried within a minute.
  const deadAfterS = deps.config.workerDeadAfterS;
  const heartbeatMs = (deadAfterS * 1000) / 6;
  const beat = async () => {
    await sql`
      INSERT INTO worker_processes (id, worker_ids) VALUES (${processId}, ${[...workerIds]}::text[])
      ON CONFLICT (id) DO UPDATE SET worker_ids = excluded.worker_ids, heartbeat_at = now()`.execute(deps.db);
    const { rows } = await sql<{ ids: string[] | null }>`
      WITH dead AS (
        DELETE FROM worker_processes WHERE heartbeat_at < now() - ${deadAfterS} * interval '1 second' RETURNING worker_ids
      )
      SELECT array_agg(w) AS ids FROM dead, unnest(dead.worker_ids) AS w`.execute(deps.db);
    const dead = rows[0]?.ids ?? [];
    if (dead.length > 0) {
      await sql`SELECT graphile_worker.force_unlock_workers(${dead}::text[])`.execute(deps.db);
      log.warn({ worker_ids: dead }, 'unlocked the jobs of workers that stopped sending heartbeats');
    }
  };
  // graphile-worker 0.17 does not await its complete/fail-job writes: with the
  // default (unbatched) settings a database restart turns them into unhandled
  // rejections, which end the process (close-with-grace). Batched (delay 0),
  // such a failure stops the runner instead; we then start a new runner once
  // the database answers, after unlocking the old runner's jobs ourselves
  // (otherwise they would stay locked for graphile-worker's 4 hours).
  const options = {
    pgPool: pool,
    taskList: buildTaskList(deps),
    concurrency: deps.config.workerConcurrency,
    noHandleSignals: true,
    pollInterval: 2_000,
    // Batching (graphile-worker's "performance" guide): fetch jobs for every
    // slot in one query and complete them in one statement per tick. A burst of
    // single-event process_events jobs (one per POST /email/events) spent more
    // time fetching and deleting jobs than deciding them (bench/campaigns.ts).
    // A completed job could run again after a crash within the batch delay:
    // every task here is idempotent (events decided once, sends claimed by status).
    preset: {
      worker: { localQueue: { size: deps.config.workerConcurrency }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
    },
    // Periodic tasks, one line each. graphile-worker runs each once per tick
    // across all worker processes (known_crontabs), however many there are.
    crontab: [BACKLOG_CRON, RETENTION_CRON, AUTO_DISABLE_CRON, IMAP_POLL_CRON, STATS_FOLD_CRON, ACCOUNT_HEALTH_CRON].join('\n'),
    logger,
    events,
  };
  let stopping = false;
  let runner: Runner = await run(options);
  const restartWhenDatabaseIsBack = async (ended: Runner, err?: unknown) => {
    if (stopping || ended !== runner) return;
    log.warn({ err }, 'the job runner stopped (database unavailable?); restarting it once the database answers');
    const oldIds = [...workerIds];
    while (!stopping) {
      try {
        await sql`SELECT graphile_worker.force_unlock_workers(${oldIds}::text[])`.execute(deps.db);
        for (const id of oldIds) workerIds.delete(id);
        const next = await run(options);
        if (stopping) {
          await next.stop();
          return;
        }
        runner = next;
        supervise(next);
        log.info('job runner restarted');
        return;
      } catch (e) {
        log.warn({ err: e }, 'job runner not restarted yet; retrying in 1 s');
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
  };
  const supervise = (r: Runner) => {
    r.promise.then(
      () => restartWhenDatabaseIsBack(r),
      (err: unknown) => restartWhenDatabaseIsBack(r, err),
    );
  };
  supervise(runner);
  // A runner shutting down after a fatal error (its complete/fail-job write
  // failed) waits for its running jobs; one that never ends (a job stuck on
  // a connection or a lock the outage left behind) would keep the runner, and
  // every job of this process, stopped for good. Past twice WORKER_DEAD_AFTER_S
  // (60 s by default) it is abandoned and replaced: its jobs are unlocked and
  // run again (every task is idempotent), whatever its stuck ones do.
  const shutdownStuckMs = deadAfterS * 2_000;
  events.on('pool:gracefulShutdown', ({ workerPool }) => {
    if (stopping || workerPool.id !== currentPoolId) return;
    const shutting = runner;
    const timer = setTimeout(() => {
      log.error({ pool: workerPool.id }, `the job runner did not finish shutting down within ${shutdownStuckMs / 1000} s; abandoning it`);
      void restartWhenDatabaseIsBack(shutting, new Error('shutdown stuck'));
    }, shutdownStuckMs);
    timer.unref();
    shutting.promise.then(() => clearTimeout(timer), () => clearTimeout(timer));
  });
  await beat().catch((err) => log.warn({ err }, 'worker heartbeat failed'));
  const heartbeat = setInterval(() => void beat().catch((err) => log.warn({ err }, 'worker heartbeat failed')), heartbeatMs);
  heartbeat.unref();
  const dispatcher = new WebhookDispatcher({ db: deps.db, pool, config: deps.config, log: log.child({ component: 'webhooks' }) });
  await dispatcher.start();
  const decider = new CampaignDecider({ db: deps.db, clock: deps.now, decide: decideOptions(deps), log: log.child({ component: 'campaign-decider' }) });
  decider.start();
  return {
    get runner() {
      return runner;
    },
    dispatcher,
    async stop() {
      stopping = true;
      clearInterval(heartbeat);
      // A runner that stopped on its own (database outage) rejects stop().
      await Promise.all([runner.stop().catch(() => {}), dispatcher.stop(), decider.stop()]);
      // After the runner: no send is in flight any more, so the pooled SMTP
      // connections can say QUIT instead of being cut when the process exits.
      closeTransports();
      await sql`DELETE FROM worker_processes WHERE id = ${processId}`.execute(deps.db).catch(() => {});
    },
  };
}
