// Mail-account health (the `email.account.health` webhook event and the
// dashboard's warning): every 15 minutes, each account's bounce and complaint
// rates over the last 24 hours, from the statistics (buckets plus unfolded
// deltas; rates as everywhere, docs/glossary.md), against the thresholds
// mailbox providers enforce. A change of state is stored on the account and
// announced once; the same state again announces nothing.
import { sql } from 'kysely';
import type { Task } from 'graphile-worker';
import type { Db } from '../db/pool.ts';
import { emit } from '../events/emit.ts';
import { JOB_PRIORITY, type JobName } from '../lib/jobs.ts';
import { rate } from './read.ts';

export const ACCOUNT_HEALTH_CRON = `*/15 * * * * ${'account_health' satisfies JobName} ?max=1&priority=${JOB_PRIORITY.background}`;

export type HealthState = 'ok' | 'warning' | 'critical';
/**
 * Percent thresholds. Google and Yahoo ask bulk senders to keep complaints
 * under 0.1 % and never reach 0.3 %; a bounce rate over 2 % is where providers
 * start to throttle, over 5 % where accounts get suspended. Below MIN_SENT
 * messages in the window a rate says little: the state is `ok`.
 */
export const HEALTH_RULES = {
  windowHours: 24,
  minSent: 50,
  bounce: { warning: 2, critical: 5 },
  complaint: { warning: 0.1, critical: 0.3 },
} as const;

export function healthState(sent: number, bounceRate: number | null, complaintRate: number | null): HealthState {
  if (sent < HEALTH_RULES.minSent) return 'ok';
  const b = bounceRate ?? 0;
  const c = complaintRate ?? 0;
  if (b >= HEALTH_RULES.bounce.critical || c >= HEALTH_RULES.complaint.critical) return 'critical';
  if (b >= HEALTH_RULES.bounce.warning || c >= HEALTH_RULES.complaint.warning) return 'warning';
  return 'ok';
}

export type HealthChange = {
  mail_account_id: string; team_id: string; from_email: string; window_hours: number;
  bounce_rate: number | null; complaint_rate: number | null; state: HealthState; previous: HealthState;
};

/**
 * Checks every account with mail in the window (or not `ok`), in one
 * transaction: the accounts' rows are locked (SKIP LOCKED: one being edited
 * waits for the next run), changed states stored and one event per change
 * emitted to the account's team. Each account reads its own index range of
 * the buckets, so the cost follows the accounts, not the history.
 */
export async function checkAccountHealth(db: Db): Promise<HealthChange[]> {
  return db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ id: string; team_id: string; from_email: string; health_state: HealthState; sent: number; bounced: number; complained: number }>`
      WITH since AS (SELECT date_bin('15 minutes', now() - make_interval(hours => ${HEALTH_RULES.windowHours}), TIMESTAMPTZ '2000-01-01 00:00:00+00') AS t)
      SELECT a.id, a.team_id, a.from_email, a.health_state,
             coalesce(s.sent, 0)::float8 AS sent, coalesce(s.bounced, 0)::float8 AS bounced, coalesce(s.complained, 0)::float8 AS complained
        FROM mail_accounts a
        CROSS JOIN since
        LEFT JOIN LATERAL (
          SELECT sum(sent) AS sent, sum(bounced_hard + bounced_soft) AS bounced, sum(complained) AS complained
            FROM (SELECT sent, bounced_hard, bounced_soft, complained FROM stats_buckets b
                   WHERE b.team_id = a.team_id AND b.mail_account_id = a.id AND b.bucket >= since.t
                  UNION ALL
                  SELECT sent, bounced_hard, bounced_soft, complained FROM stats_deltas d
                   WHERE d.team_id = a.team_id AND d.mail_account_id = a.id AND d.bucket >= since.t) x
        ) s ON true
       WHERE a.deleted_at IS NULL AND (s.sent IS NOT NULL OR a.health_state <> 'ok')
       ORDER BY a.id
       FOR NO KEY UPDATE OF a SKIP LOCKED`.execute(tx);
    const changes: HealthChange[] = [];
    for (const r of rows) {
      const bounceRate = rate(r.bounced, r.sent);
      const complaintRate = rate(r.complained, r.sent - r.bounced);
      const state = healthState(r.sent, bounceRate, complaintRate);
      if (state === r.health_state) continue;
      changes.push({
        mail_account_id: r.id, team_id: r.team_id, from_email: r.from_email, window_hours: HEALTH_RULES.windowHours,
        bounce_rate: bounceRate, complaint_rate: complaintRate, state, previous: r.health_state,
      });
    }
    if (changes.length === 0) return [];
    await sql`
      UPDATE mail_accounts a SET health_state = x.state
        FROM jsonb_to_recordset(${JSON.stringify(changes.map((c) => ({ id: c.mail_account_id, state: c.state })))}::jsonb) AS x (id uuid, state text)
       WHERE a.id = x.id`.execute(tx);
    const at = new Date();
    await emit(tx, changes.map((c) => ({
      teamId: c.team_id,
      name: 'email.account.health' as const,
      payload: {
        mail_account_id: c.mail_account_id, from_email: c.from_email, window_hours: c.window_hours,
        bounce_rate: c.bounce_rate, complaint_rate: c.complaint_rate, state: c.state, previous_state: c.previous,
      },
      occurredAt: at,
    })));
    return changes;
  });
}

/** The cron task (registered in tasks.ts, scheduled by ACCOUNT_HEALTH_CRON). */
export function accountHealthTask(db: Db): Task<'account_health'> {
  return async (_payload, helpers) => {
    for (const c of await checkAccountHealth(db)) {
      helpers.logger.info(`mail account ${c.mail_account_id}: ${c.previous} -> ${c.state} (bounce ${c.bounce_rate} %, complaint ${c.complaint_rate} %)`);
    }
  };
}
