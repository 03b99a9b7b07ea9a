// A webhook's delivery chart (its dashboard page): per hour or day of the
// period, the attempts made, how many got a 2xx, and the latency (median and
// 95th percentile of the attempts' durations), from the deliveries' attempt
// logs. Bounded: the newest WEBHOOK_STATS_CAP deliveries of the period are
// read (an index range of webhook_deliveries_webhook_idx); past it the page
// says the chart covers only those.
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { jsonIsland, PERIODS, type Period } from './stats-view.ts';

export const WEBHOOK_STATS_CAP = 10_000;

export type WebhookPoint = { at: string; attempts: number; succeeded: number; failed: number; p50_ms: number | null; p95_ms: number | null };

export async function webhookStats(db: Db, teamId: string, webhookId: string, period: Period) {
  const { days, interval } = PERIODS[period];
  const to = new Date();
  const from = new Date(to.getTime() - days * 86_400_000);
  const unit = sql.lit(interval);
  const { rows } = await sql<{ at: Date; attempts: number; succeeded: number; p50: number | null; p95: number | null; capped: boolean }>`
    WITH d AS (
      SELECT attempt_log FROM webhook_deliveries
       WHERE webhook_id = ${webhookId}::uuid AND team_id = ${teamId}::uuid AND created_at >= ${from}::timestamptz
       ORDER BY created_at DESC, id DESC LIMIT ${WEBHOOK_STATS_CAP + 1}
    ), a AS (
      SELECT (e ->> 'at')::timestamptz AS at, (e ->> 'response_code')::int AS code, (e ->> 'duration_ms')::float8 AS ms
        FROM d, jsonb_array_elements(d.attempt_log) e
    ), slots AS (
      SELECT generate_series(date_trunc(${unit}, ${from}::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', ${to}::timestamptz,
                             ${sql.lit(`1 ${interval}`)}::interval) AS at
    ), points AS (
      SELECT date_trunc(${unit}, at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS at, count(*)::int AS attempts,
             count(*) FILTER (WHERE code BETWEEN 200 AND 299)::int AS succeeded,
             percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95
        FROM a WHERE at >= ${from}::timestamptz GROUP BY 1
    )
    SELECT s.at, coalesce(p.attempts, 0) AS attempts, coalesce(p.succeeded, 0) AS succeeded, p.p50, p.p95,
           (SELECT count(*) FROM d) > ${WEBHOOK_STATS_CAP} AS capped
      FROM slots s LEFT JOIN points p ON p.at = s.at ORDER BY s.at`.execute(db);
  const series: WebhookPoint[] = rows.map((r) => ({
    at: r.at.toISOString(), attempts: r.attempts, succeeded: r.succeeded, failed: r.attempts - r.succeeded,
    p50_ms: r.p50 === null ? null : Math.round(r.p50), p95_ms: r.p95 === null ? null : Math.round(r.p95),
  }));
  return {
    period,
    interval,
    capped: rows[0]?.capped ?? false,
    cap: WEBHOOK_STATS_CAP,
    rows: series.filter((p) => p.attempts > 0).reverse(),
    island: jsonIsland({ series }),
    series,
  };
}

/** CSV of the webhook series: at, attempts, succeeded, failed, p50_ms, p95_ms. */
export function webhookCsv(series: WebhookPoint[]): string {
  const keys = ['attempts', 'succeeded', 'failed', 'p50_ms', 'p95_ms'] as const;
  return [['at', ...keys].join(','), ...series.map((p) => [p.at, ...keys.map((k) => (p[k] === null ? '' : String(p[k])))].join(','))].join('\r\n') + '\r\n';
}
