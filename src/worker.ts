// Worker entry point (background jobs only). `npm start` runs the worker inside
// the API process; in production run `npm run worker` as its own process(es).
import { run, Logger, type Runner } from 'graphile-worker';
import type pg from 'pg';
import pino from 'pino';
import { buildTaskList, type TaskDeps } from './tasks.ts';

export async function startWorker(pool: pg.Pool, deps: TaskDeps, log: pino.Logger): Promise<Runner> {
  const logger = new Logger((scope) => (level, message, meta) => {
    const l = level === 'warning' ? 'warn' : level;
    (log[l as 'info'] ?? log.info).call(log, { scope, ...meta }, message);
  });
  return run({
    pgPool: pool,
    taskList: buildTaskList(deps),
    concurrency: deps.config.workerConcurrency,
    noHandleSignals: true,
    pollInterval: 2_000,
    crontab: '',
    logger,
  });
}

if (import.meta.main) {
  const { main } = await import('./main.ts');
  await main({ api: false, worker: true });
}
