// Auto-disable (as Svix and Stripe do): a webhook whose every attempt has
// failed for WEBHOOK_AUTO_DISABLE_DAYS (default 5; 0 = never) is disabled, its
// deliveries park (the paused-backlog rules then apply), and the team's other
// endpoints that subscribe to `webhook.disabled` are told.
//
// "Every attempt failed for N days" is, precisely: the webhook is enabled, its
// first failed attempt since its last success (webhooks.failing_since, kept by
// recordAttempts) is at least N days old, and that streak holds at least
// WEBHOOK_AUTO_DISABLE_MIN_FAILURES (default 10) failed attempts, so an endpoint
// that got one event a week ago and failed it is not disabled on one data point.
// A success anywhere in the streak resets it.
import type { Task } from 'graphile-worker';
import { sql } from 'kysely';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { emit } from '../events/emit.ts';
import { parkDeliveries } from './deliveries.ts';
import { JOB_PRIORITY, type JobName } from '../lib/jobs.ts';

/** graphile-worker cron line: every 15 minutes, cluster-wide, housekeeping priority. */
export const AUTO_DISABLE_CRON = `*/15 * * * * ${'webhook_auto_disable' satisfies JobName} ?max=1&priority=${JOB_PRIORITY.background}`;

export type AutoDisableRules = { days: number; minFailures: number; now?: () => Date };
export type DisabledWebhook = { id: string; team_id: string; url: string; disabled_at: Date; reason: string; last_failure_at: Date | null };

export function autoDisableReason(days: number, failures: number, since: Date): string {
  return `every delivery attempt failed for ${days} day${days === 1 ? '' : 's'} (${failures} attempts since ${since.toISOString()})`;
}

/**
 * Disables every webhook that meets the rule, set-based, in one transaction:
 * the rows are locked (SKIP LOCKED: one being edited right now waits for the
 * next run), disabled with the reason and time, their deliveries parked, and
 * one `webhook.disabled` event emitted per webhook. Across teams, like the
 * backlog bound; each event belongs to its webhook's team.
 */
export async function disableFailingWebhooks(db: Db, rules: AutoDisableRules): Promise<DisabledWebhook[]> {
  if (rules.days <= 0) return [];
  const now = (rules.now ?? (() => new Date()))();
  const cutoff = new Date(now.getTime() - rules.days * 86_400_000);
  return db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ id: string; team_id: string; url: string; failing_since: Date; failures_since_success: number; last_failure_at: Date | null }>`
      SELECT id, team_id, url, failing_since, failures_since_success, last_failure_at FROM webhooks
       WHERE is_enabled AND failing_since <= ${cutoff.toISOString()}::timestamptz AND failures_since_success >= ${rules.minFailures}
       ORDER BY id FOR UPDATE SKIP LOCKED`.execute(tx);
    if (rows.length === 0) return [];
    const disabled = rows.map((r) => ({
      id: r.id, team_id: r.team_id, url: r.url, disabled_at: now, last_failure_at: r.last_failure_at,
      reason: autoDisableReason(rules.days, r.failures_since_success, r.failing_since),
    }));
    await sql`
      UPDATE webhooks w SET is_enabled = false, disabled_reason = x.reason, auto_disabled_at = ${now.toISOString()}::timestamptz, updated_at = now()
        FROM jsonb_to_recordset(${JSON.stringify(disabled.map((d) => ({ id: d.id, reason: d.reason })))}::jsonb) AS x (id uuid, reason text)
       WHERE w.id = x.id`.execute(tx);
    await parkDeliveries(tx, disabled.map((d) => d.id));
    await emit(tx, disabled.map((d) => ({
      teamId: d.team_id,
      name: 'webhook.disabled' as const,
      payload: {
        webhook_id: d.id,
        url: d.url,
        disabled_at: d.disabled_at.toISOString(),
        reason: d.reason,
        last_failure_at: d.last_failure_at ? d.last_failure_at.toISOString() : null,
      },
      occurredAt: now,
    })));
    return disabled;
  });
}

/** The cron task (registered in tasks.ts, scheduled by AUTO_DISABLE_CRON). */
export function autoDisableTask(db: Db, config: Config): Task<'webhook_auto_disable'> {
  return async (_payload, helpers) => {
    const disabled = await disableFailingWebhooks(db, { days: config.webhookAutoDisableDays, minFailures: config.webhookAutoDisableMinFailures });
    for (const d of disabled) helpers.logger.warn(`webhook ${d.id} disabled: ${d.reason}`);
  };
}
