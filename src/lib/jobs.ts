// The background jobs: one name and one payload type per job, declared to
// graphile-worker (GraphileWorker.Tasks) so a task's payload is typed where it
// is handled, and one way to enqueue them (addJobs) so name, payload, priority
// and attempts are never spelled out by hand at a call site. The handlers are
// registered in src/tasks.ts; payloads carry ids only, the task re-reads rows.
import { sql, type Kysely } from 'kysely';
import { PREPARED } from '../db/pool.ts';
import { pgTimeText } from '../db/iso.ts';

export type JobPayloads = {
  /** Events recorded by emit() (events/emit.ts), up to EVENTS_PER_JOB a job. */
  process_events: { event_ids: string[] };
  /** email_send_log rows to send: a batch from the engine, one id for a retry. */
  send_email: { email_send_log_ids: string[] };
  /** Cron (webhooks/backlog.ts): no payload. */
  webhook_paused_backlog: Record<string, never>;
  /** Cron (ops/retention.ts): no payload. */
  retention: Record<string, never>;
  /** Cron (webhooks/auto-disable.ts): no payload. */
  webhook_auto_disable: Record<string, never>;
  /** One uploaded CSV file (contacts/imports.ts). */
  contact_import: { import_id: string };
  /** Cron (inbound/imap/poll.ts): no payload. */
  imap_poll: Record<string, never>;
  /** The next batch of a broadcast's recipient list (campaigns/broadcast.ts). */
  broadcast_build: { campaign_send_id: string };
  /** Whether a fully listed broadcast has finished (campaigns/broadcast.ts). */
  broadcast_finish: { campaign_send_id: string };
  /** The next step of an automation send's iterations (campaigns/automation.ts). */
  automation_iteration: { campaign_send_id: string };
  /** Cron (stats/fold.ts): no payload. */
  stats_fold: Record<string, never>;
  /** Cron (stats/health.ts): no payload. */
  account_health: Record<string, never>;
};

declare global {
  namespace GraphileWorker {
    interface Tasks extends JobPayloads {}
  }
}

export type JobName = keyof JobPayloads;

/**
 * graphile-worker runs lower numbers first; the queue is shared by all teams,
 * so this order is what keeps a password reset ahead of a broadcast.
 */
export const JOB_PRIORITY = {
  transactional: -2,
  eventTriggered: -1,
  eventProcessing: 0,
  broadcast: 1,
  /** Imports, retention, housekeeping crons. */
  background: 2,
} as const;

const JOB_DEFAULTS: { [N in JobName]: { maxAttempts: number; priority: number } } = {
  // Event handlers are idempotent and cheap to retry; a long outage should not drop events.
  process_events: { maxAttempts: 25, priority: JOB_PRIORITY.eventProcessing },
  send_email: { maxAttempts: 10, priority: JOB_PRIORITY.eventTriggered },
  webhook_paused_backlog: { maxAttempts: 25, priority: JOB_PRIORITY.background },
  retention: { maxAttempts: 25, priority: JOB_PRIORITY.background },
  webhook_auto_disable: { maxAttempts: 25, priority: JOB_PRIORITY.background },
  // One attempt: a re-run would redo committed batches (harmless, upserts are
  // idempotent) but the import page would count them twice; a failure is shown instead.
  contact_import: { maxAttempts: 1, priority: JOB_PRIORITY.background },
  // A failed run is not retried: the next minute's run polls what is due.
  imap_poll: { maxAttempts: 1, priority: JOB_PRIORITY.background },
  // A batch is one transaction behind a stored cursor: a retry continues where the last commit left off.
  broadcast_build: { maxAttempts: 25, priority: JOB_PRIORITY.broadcast },
  broadcast_finish: { maxAttempts: 25, priority: JOB_PRIORITY.broadcast },
  // The next minute's run folds what a failed one left.
  automation_iteration: { maxAttempts: 25, priority: JOB_PRIORITY.broadcast },
  stats_fold: { maxAttempts: 1, priority: JOB_PRIORITY.background },
  account_health: { maxAttempts: 1, priority: JOB_PRIORITY.background },
};

export type JobSpec<N extends JobName> = { payload: JobPayloads[N]; priority?: number; runAt?: Date; maxAttempts?: number };

/**
 * Enqueues jobs of one kind in the caller's transaction (one statement for any
 * number), so they commit or roll back with the change that caused them.
 */
export async function addJobs<N extends JobName, D>(db: Kysely<D>, name: N, jobs: JobSpec<N>[]): Promise<void> {
  if (jobs.length === 0) return;
  const d = JOB_DEFAULTS[name];
  const specs = jobs.map((j) => ({
    identifier: name,
    payload: j.payload,
    priority: j.priority ?? d.priority,
    max_attempts: j.maxAttempts ?? d.maxAttempts,
    // pgTimeText: a client's schedule may fall in UTC year 10000 (toISOString's `+010000-…` PostgreSQL refuses).
    ...(j.runAt ? { run_at: pgTimeText(j.runAt) } : {}),
  }));
  // Prepared (src/db/pool.ts): most requests that write enqueue a job, and an
  // unnamed statement is parsed, analysed and planned at every call. The
  // function's own statements are PL/pgSQL's, cached per session either way.
  // It answers a count, not the job rows: nothing reads them, and a prepared
  // statement's result type must not change under it (graphile-worker's own
  // migrations may alter its jobs table).
  await sql`${sql.raw(PREPARED)} SELECT count(*) FROM graphile_worker.add_jobs(
      ARRAY(SELECT json_populate_recordset(NULL::graphile_worker.job_spec, ${JSON.stringify(specs)}::json)))`.execute(db);
}
