// Webhook delivery statistics (migration 0027): attempts per 15-minute bucket,
// how many got a 2xx, and a latency histogram. recordAttempts (deliveries.ts)
// adds a delta row with every recorded attempt, in its own statement; the
// stats_fold job folds deltas into buckets (foldWebhookStats); a read adds
// buckets and unfolded deltas in one statement, so it is exact and costs a few
// rows per bucket whatever the number of deliveries.
//
// Latency histogram: bin = floor(8 * log2(1 + ms)), eight bins per doubling.
// A percentile is read as percentile_cont would over the attempts' durations,
// each duration taken at its place inside its bin (spread evenly over the bin
// on the log scale): each duration is placed inside its true bin, so the
// answer is within one bin (9 %) of the exact one: |error| <= 0.0905 (ms + 1).
import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../db/pool.ts';
import { bucketOf } from '../stats/deltas.ts';

/** Bins per doubling of (1 + duration in ms). */
export const BINS_PER_DOUBLING = 8;
/** The last bin (about 16 minutes), which also holds anything longer. */
export const MAX_BIN = 159;

/** The latency bin of a duration in ms (SQL), as migration 0027 computes it. */
export const latencyBinOf = (ms: RawBuilder<unknown>) =>
  sql`least(${sql.lit(MAX_BIN)}, floor(${sql.lit(BINS_PER_DOUBLING)} * ln(1 + greatest(0, ${ms}::float8)) / ln(2)))::smallint`;

/** The latency bin of a duration in ms (the same rule in TypeScript). */
export function latencyBin(ms: number): number {
  return Math.min(MAX_BIN, Math.floor((BINS_PER_DOUBLING * Math.log(1 + Math.max(0, ms))) / Math.LN2));
}

/** A histogram: attempts per bin, any order. */
export type Histogram = { bin: number; n: number }[];

/**
 * The q-quantile (0..1) of the durations a histogram holds, with
 * percentile_cont's interpolation between neighbouring durations; null when
 * it holds none.
 */
export function quantile(hist: Histogram, q: number): number | null {
  const bins = hist.filter((h) => h.n > 0).sort((a, b) => a.bin - b.bin);
  const total = bins.reduce((s, h) => s + h.n, 0);
  if (total === 0) return null;
  // The k-th smallest duration (0-based): the (j + 0.5)/n-th point of its bin.
  const at = (k: number): number => {
    let before = 0;
    for (const h of bins) {
      if (k < before + h.n) {
        const pos = h.bin + (k - before + 0.5) / h.n;
        return 2 ** (pos / BINS_PER_DOUBLING) - 1;
      }
      before += h.n;
    }
    return 2 ** ((bins.at(-1)!.bin + 1) / BINS_PER_DOUBLING) - 1;
  };
  const p = q * (total - 1);
  const lo = Math.floor(p);
  const vLo = at(lo);
  return lo === p ? vLo : vLo + (at(lo + 1) - vLo) * (p - lo);
}

export type WebhookPoint = { at: string; attempts: number; succeeded: number; failed: number; p50_ms: number | null; p95_ms: number | null };

/**
 * Every hour or day (UTC) from the one holding `from` to the one holding
 * `to`: attempts, 2xx answers, failures and the latency median and 95th
 * percentile. One statement: buckets plus unfolded deltas.
 */
export async function webhookSeries(db: Db, teamId: string, webhookId: string, from: Date, to: Date, interval: 'hour' | 'day'): Promise<WebhookPoint[]> {
  const unit = sql.lit(interval);
  const { rows } = await sql<{ at: Date; bin: number; attempts: number; succeeded: number }>`
    WITH x AS (
      SELECT bucket, bin, attempts, succeeded FROM webhook_stats_buckets
       WHERE webhook_id = ${webhookId}::uuid AND team_id = ${teamId}::uuid AND bucket >= ${bucketOf(sql`${from}::timestamptz`)} AND bucket <= ${to}::timestamptz
      UNION ALL
      SELECT bucket, bin, attempts, succeeded FROM webhook_stats_deltas
       WHERE webhook_id = ${webhookId}::uuid AND team_id = ${teamId}::uuid AND bucket >= ${bucketOf(sql`${from}::timestamptz`)} AND bucket <= ${to}::timestamptz
    )
    SELECT date_trunc(${unit}, bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS at, bin, sum(attempts)::int AS attempts, sum(succeeded)::int AS succeeded
      FROM x GROUP BY 1, 2`.execute(db);
  const slots = new Map<number, { attempts: number; succeeded: number; hist: Histogram }>();
  for (const r of rows) {
    const key = r.at.getTime();
    let s = slots.get(key);
    if (!s) slots.set(key, (s = { attempts: 0, succeeded: 0, hist: [] }));
    s.attempts += r.attempts;
    s.succeeded += r.succeeded;
    s.hist.push({ bin: r.bin, n: r.attempts });
  }
  const series: WebhookPoint[] = [];
  for (let at = truncUtc(from, interval); at <= to.getTime(); at = nextSlot(at, interval)) {
    const s = slots.get(at);
    const p50 = s ? quantile(s.hist, 0.5) : null;
    const p95 = s ? quantile(s.hist, 0.95) : null;
    series.push({
      at: new Date(at).toISOString(),
      attempts: s?.attempts ?? 0,
      succeeded: s?.succeeded ?? 0,
      failed: (s?.attempts ?? 0) - (s?.succeeded ?? 0),
      p50_ms: p50 === null ? null : Math.round(p50),
      p95_ms: p95 === null ? null : Math.round(p95),
    });
  }
  return series;
}

function truncUtc(d: Date, interval: 'hour' | 'day'): number {
  const t = new Date(d);
  t.setUTCMinutes(0, 0, 0);
  if (interval === 'day') t.setUTCHours(0);
  return t.getTime();
}

const nextSlot = (at: number, interval: 'hour' | 'day') => at + (interval === 'hour' ? 3_600_000 : 86_400_000);

/** Deltas folded per transaction. */
const FOLD_BATCH = 50_000;
/** pg advisory lock key of this fold ("whst" in ASCII). */
const FOLD_LOCK = 0x77687374;

/** Folds every webhook delta present when it starts into the buckets; returns the number folded. */
export async function foldWebhookStats(db: Db, batch = FOLD_BATCH): Promise<number> {
  const { rows: top } = await sql<{ max: string | null }>`SELECT max(id)::text AS max FROM webhook_stats_deltas`.execute(db);
  const upTo = top[0]?.max;
  if (!upTo) return 0;
  let total = 0;
  for (;;) {
    const n = await db.transaction().execute(async (trx) => {
      const { rows: lock } = await sql<{ ok: boolean }>`SELECT pg_try_advisory_xact_lock(${FOLD_LOCK}) AS ok`.execute(trx);
      if (!lock[0]?.ok) return -1;
      const { rows } = await sql<{ n: number }>`
        WITH d AS (
          DELETE FROM webhook_stats_deltas WHERE id IN (
            SELECT id FROM webhook_stats_deltas WHERE id <= ${upTo}::bigint ORDER BY id LIMIT ${batch})
          RETURNING *
        ), summed AS (
          SELECT team_id, webhook_id, bucket, bin, sum(attempts) AS attempts, sum(succeeded) AS succeeded, count(*) AS n
            FROM d GROUP BY team_id, webhook_id, bucket, bin
        ), up AS (
          INSERT INTO webhook_stats_buckets (team_id, webhook_id, bucket, bin, attempts, succeeded)
          SELECT team_id, webhook_id, bucket, bin, attempts, succeeded FROM summed ORDER BY webhook_id, bucket, bin
          ON CONFLICT (webhook_id, bucket, bin) DO UPDATE
            SET attempts = webhook_stats_buckets.attempts + EXCLUDED.attempts,
                succeeded = webhook_stats_buckets.succeeded + EXCLUDED.succeeded
        )
        SELECT coalesce(sum(n), 0)::int AS n FROM summed`.execute(trx);
      return rows[0]?.n ?? 0;
    });
    if (n < 0) return total;
    total += n;
    if (n < batch) return total;
  }
}
