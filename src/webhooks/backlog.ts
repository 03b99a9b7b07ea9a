// The paused backlog (docs/api.md, "Webhooks"): a disabled webhook
// keeps its deliveries as parked rows (status 'pending', next_attempt_at NULL)
// until it is enabled again, bounded by age and by count; and recover, which
// queues failed deliveries again with their envelope ids.
import type { Task } from 'graphile-worker';
import { JOB_PRIORITY, type JobName } from '../lib/jobs.ts';
import { sql } from 'kysely';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { DELIVERY_CHANNEL } from './deliveries.ts';

/** How far back recover reaches (as Svix's recover does). */
export const RECOVER_MAX_DAYS = 14;

/** graphile-worker cron line of the bound: once a minute, cluster-wide. */
export const BACKLOG_CRON = `* * * * * ${'webhook_paused_backlog' satisfies JobName} ?max=1&priority=${JOB_PRIORITY.background}`;

export type BacklogLimits = { maxAgeDays: number; maxCount: number };
export type BacklogDrops = { tooOld: number; overCount: number };

export function tooOldMessage(days: number): string {
  return `dropped from the paused backlog: older than ${days} day${days === 1 ? '' : 's'}`;
}

export function overCountMessage(max: number): string {
  return `dropped from the paused backlog: more than ${max.toLocaleString('en-US')} pending deliveries`;
}

/**
 * Marks `failed` (with the reason in last_error) the parked deliveries of
 * disabled webhooks that are older than the age limit or beyond the newest
 * `maxCount`. Set-based: one statement per rule over every disabled webhook.
 *
 * Housekeeping across teams, like retention: no team scope, by design.
 *
 * The disabled webhooks are locked first (FOR NO KEY UPDATE SKIP LOCKED): an
 * enable or a delete (FOR UPDATE) of one of them waits for this transaction
 * instead of racing it row by row (a deadlock with the enable's unpark, which
 * would surface as a 500 on the enable); one being enabled right now is skipped
 * until the next run. The fan-out's foreign-key checks (KEY SHARE) are not
 * blocked. `next_attempt_at IS NULL` is re-checked on each row, so a row
 * unparked meanwhile is never dropped.
 */
export async function enforcePausedBacklog(db: Db, limits: BacklogLimits): Promise<BacklogDrops> {
  return db.transaction().execute(async (tx) => {
    const { rows: hooks } = await sql<{ id: string }>`
      SELECT id FROM webhooks WHERE NOT is_enabled ORDER BY id FOR NO KEY UPDATE SKIP LOCKED`.execute(tx);
    if (hooks.length === 0) return { tooOld: 0, overCount: 0 };
    const ids = hooks.map((h) => h.id);
    // The lock read the newest version of each row; one enabled meanwhile is left alone.
    const old = await sql`
      UPDATE webhook_deliveries d
      SET status = 'failed', next_attempt_at = NULL, locked_until = NULL, last_error = ${tooOldMessage(limits.maxAgeDays)}, updated_at = now()
      FROM webhooks w
      WHERE w.id = ANY(${ids}::uuid[]) AND NOT w.is_enabled AND d.webhook_id = w.id
        AND d.status = 'pending' AND d.next_attempt_at IS NULL
        AND d.created_at < now() - ${limits.maxAgeDays} * interval '1 day'`.execute(tx);
    // Per webhook, skip the newest maxCount pending rows on the pending index
    // (index-only, newest first) and drop the rest.
    const over = await sql`
      UPDATE webhook_deliveries d
      SET status = 'failed', next_attempt_at = NULL, locked_until = NULL, last_error = ${overCountMessage(limits.maxCount)}, updated_at = now()
      FROM (
        SELECT x.id
        FROM webhooks w
        CROSS JOIN LATERAL (
          SELECT p.id FROM webhook_deliveries p
          WHERE p.webhook_id = w.id AND p.status = 'pending'
          ORDER BY p.created_at DESC, p.id DESC
          OFFSET ${limits.maxCount}
        ) x
        WHERE w.id = ANY(${ids}::uuid[]) AND NOT w.is_enabled
      ) o
      WHERE d.id = o.id AND d.status = 'pending' AND d.next_attempt_at IS NULL`.execute(tx);
    return { tooOld: Number(old.numAffectedRows ?? 0), overCount: Number(over.numAffectedRows ?? 0) };
  });
}

/** The cron task that applies the bound (registered in tasks.ts, scheduled by BACKLOG_CRON). */
export function pausedBacklogTask(db: Db, config: Config): Task<'webhook_paused_backlog'> {
  return async (_payload, helpers) => {
    const drops = await enforcePausedBacklog(db, {
      maxAgeDays: config.webhookPausedBacklogDays,
      maxCount: config.webhookPausedBacklogMax,
    });
    if (drops.tooOld + drops.overCount > 0) {
      helpers.logger.warn(`paused webhook backlog: ${drops.tooOld} deliveries too old, ${drops.overCount} over the limit, marked failed`);
    }
  };
}

export type RecoverResult = { found: false } | { found: true; queued: number };

/**
 * Queues a new attempt sequence for every `failed` delivery of the webhook
 * created in [since, until), keeping each envelope id, in one statement.
 * Oldest first, as the enable's drain. On a disabled webhook they are parked,
 * to be sent after the enable (and subject to the backlog bound meanwhile).
 *
 * KEY SHARE on the webhook row orders this against an enable or disable (FOR
 * UPDATE), so a recovered row is never parked on an enabled webhook nor due
 * on a disabled one; it does not block the dispatchers' last_success_at writes.
 */
export async function recoverDeliveries(db: Db, teamId: string, webhookId: string, since: Date, until: Date): Promise<RecoverResult> {
  return db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ is_enabled: boolean }>`
      SELECT is_enabled FROM webhooks WHERE id = ${webhookId} AND team_id = ${teamId} FOR KEY SHARE`.execute(tx);
    const hook = rows[0];
    if (!hook) return { found: false };
    const res = await sql`
      UPDATE webhook_deliveries d
      SET status = 'pending', sequence_attempts = 0, max_attempts = 7, locked_until = NULL, updated_at = now(),
          next_attempt_at = CASE WHEN ${hook.is_enabled} THEN now() + o.rn * interval '1 microsecond' END
      FROM (SELECT id, row_number() OVER (ORDER BY created_at, id) AS rn
            FROM webhook_deliveries
            WHERE webhook_id = ${webhookId} AND team_id = ${teamId} AND status = 'failed'
              AND created_at >= ${since.toISOString()}::timestamptz AND created_at < ${until.toISOString()}::timestamptz) o
      WHERE d.id = o.id AND d.status = 'failed'`.execute(tx);
    const queued = Number(res.numAffectedRows ?? 0);
    if (queued > 0 && hook.is_enabled) await sql`SELECT pg_notify(${DELIVERY_CHANNEL}, '')`.execute(tx);
    return { found: true, queued };
  });
}
