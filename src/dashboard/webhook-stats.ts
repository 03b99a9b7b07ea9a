// A webhook's delivery chart (its dashboard page): per hour or day of the
// period, the attempts made, how many got a 2xx, and the latency (median and
// 95th percentile of the attempts' durations), read from the webhook's
// statistics buckets (src/webhooks/stats.ts): a few rows per 15 minutes of the
// period, whatever the number of deliveries.
import type { Db } from '../db/pool.ts';
import { webhookSeries, type WebhookPoint } from '../webhooks/stats.ts';
import { jsonIsland, PERIODS, type Period } from './stats-view.ts';

export async function webhookStats(db: Db, teamId: string, webhookId: string, period: Period) {
  const { days, interval } = PERIODS[period];
  const to = new Date();
  const from = new Date(to.getTime() - days * 86_400_000);
  const series = await webhookSeries(db, teamId, webhookId, from, to, interval);
  return {
    period,
    interval,
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
