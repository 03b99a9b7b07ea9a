// Retention: deletes old delivered webhook deliveries, events, message logs
// (email_send_log) and tracking hits, past windows set by the operator
// (RETENTION_* settings, 0 = keep forever), from an hourly cron task.
//
// Live traffic first: each statement deletes at most `batchSize` rows (oldest
// first, on a created_at index), commits on its own, skips rows another
// transaction holds (SKIP LOCKED), and the loop pauses between statements. A
// short batch means the table is done for this run.
//
// What retention never touches (decisions of the contract):
// - counters: contacts' and campaigns' counts and the messages' totals are
//   stored columns, never recomputed from the rows that remain;
// - leads, sales and campaign decisions: their event_id is set to NULL by the
//   foreign key (0012), the rows stay; the engine's cooldown and daily cap read
//   campaign_decisions, so "once per contact per campaign" outlives the events;
// - links in sent e-mail: click URLs sign their target and unsubscribe URLs
//   sign the recipient, so both work after the message row is gone.
//
// Housekeeping across teams, like the paused backlog: no team scope, by design.
import type { Task } from 'graphile-worker';
import { sql, type RawBuilder } from 'kysely';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { JOB_PRIORITY, type JobName } from '../lib/jobs.ts';

/** graphile-worker cron line: hourly, cluster-wide, at the low priority of housekeeping (+2). */
export const RETENTION_CRON = `23 * * * * ${'retention' satisfies JobName} ?max=1&priority=${JOB_PRIORITY.background}`;

export type RetentionWindows = {
  /** Days; 0 keeps forever. */
  webhookDeliveriesDays: number;
  eventsDays: number;
  messagesDays: number;
  trackingHitsDays: number;
};

export type RetentionOptions = RetentionWindows & {
  batchSize: number;
  pauseMs: number;
  /** The clock the windows count back from; injectable for tests. */
  now?: () => Date;
};

export type RetentionTable = 'tracking_hits' | 'webhook_deliveries' | 'email_send_log' | 'events';
/** Rows deleted by each statement, per table. */
export type RetentionReport = Record<RetentionTable, number[]>;

/**
 * The rows each table may lose, besides being older than its window. Only
 * finished work goes: a pending delivery, a message still queued or being
 * retried, or an event not yet processed is kept whatever its age.
 */
const PURGEABLE: Record<RetentionTable, RawBuilder<unknown>> = {
  tracking_hits: sql`true`,
  webhook_deliveries: sql`status <> 'pending'`,
  email_send_log: sql`status NOT IN ('queued', 'sending', 'deferred')`,
  // A pending delivery builds its envelope from the event row: keep the event
  // until it is delivered (deliveries normally go first, 30 days < 90). So does
  // a message still to be sent (its template reads the event), and the
  // campaign decider counts an account's waiting event-triggered messages by
  // their event.
  events: sql`processed_at IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = t.id AND d.status = 'pending')
    AND NOT EXISTS (SELECT 1 FROM email_send_log l WHERE l.event_id = t.id AND l.status IN ('queued', 'sending', 'deferred'))`,
};

function windowOf(table: RetentionTable, w: RetentionWindows): number {
  return { tracking_hits: w.trackingHitsDays, webhook_deliveries: w.webhookDeliveriesDays, email_send_log: w.messagesDays, events: w.eventsDays }[table];
}

/** One batch: at most `limit` of the oldest purgeable rows older than `cutoff`. Returns the rows deleted. */
async function deleteBatch(db: Db, table: RetentionTable, cutoff: Date, limit: number): Promise<number> {
  const res = await sql`
    DELETE FROM ${sql.table(table)} WHERE id IN (
      SELECT id FROM ${sql.table(table)} t
       WHERE t.created_at < ${cutoff.toISOString()}::timestamptz AND ${PURGEABLE[table]}
       ORDER BY t.created_at
       LIMIT ${limit}
       FOR UPDATE SKIP LOCKED)`.execute(db);
  return Number(res.numAffectedRows ?? 0);
}

/**
 * Runs retention once over every table whose window is set. Hits go first,
 * then deliveries, then messages (whose delete also takes their hits and
 * dedup rows), then events (which the others reference).
 */
export async function runRetention(db: Db, opts: RetentionOptions): Promise<RetentionReport> {
  const now = (opts.now ?? (() => new Date()))();
  const report: RetentionReport = { tracking_hits: [], webhook_deliveries: [], email_send_log: [], events: [] };
  for (const table of ['tracking_hits', 'webhook_deliveries', 'email_send_log', 'events'] as const) {
    const days = windowOf(table, opts);
    if (days <= 0) continue;
    const cutoff = new Date(now.getTime() - days * 86_400_000);
    for (;;) {
      const n = await deleteBatch(db, table, cutoff, opts.batchSize);
      report[table].push(n);
      if (n < opts.batchSize) break;
      if (opts.pauseMs > 0) await new Promise((r) => setTimeout(r, opts.pauseMs));
    }
  }
  return report;
}

export function retentionOptions(config: Config): RetentionOptions {
  return {
    webhookDeliveriesDays: config.retention.webhookDeliveriesDays,
    eventsDays: config.retention.eventsDays,
    messagesDays: config.retention.messagesDays,
    trackingHitsDays: config.retention.trackingHitsDays,
    batchSize: config.retention.batchSize,
    pauseMs: config.retention.pauseMs,
  };
}

/** The cron task (registered in tasks.ts, scheduled by RETENTION_CRON). */
export function retentionTask(db: Db, config: Config): Task<'retention'> {
  return async (_payload, helpers) => {
    const report = await runRetention(db, retentionOptions(config));
    const total = (t: RetentionTable) => report[t].reduce((a, b) => a + b, 0);
    const parts = (Object.keys(report) as RetentionTable[]).filter((t) => total(t) > 0).map((t) => `${total(t)} ${t}`);
    if (parts.length > 0) helpers.logger.info(`retention deleted ${parts.join(', ')}`);
  };
}
