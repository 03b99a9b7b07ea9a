// Reading the mail statistics: buckets plus the deltas not yet folded, in one
// statement (exact, also while a fold runs), summed per hour or day of the
// asked time zone (15-minute buckets fold into the hours and days of every
// zone), every slot of the range present (zeros included), and the rates of
// docs/glossary.md computed from the totals.
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { STATS_KEYS, type StatsKey } from '../db/schema-stats.ts';

export type StatsScope = { kind: 'campaign'; id: string } | { kind: 'transactional' } | { kind: 'account'; id: string } | { kind: 'team' };
export type Counts = Record<StatsKey, number>;
export type Rates = Record<'delivery' | 'bounce' | 'human_open' | 'human_click' | 'click_to_open' | 'unsubscribe' | 'complaint', number | null>;
export type StatsAnswer = {
  from: string; to: string; interval: 'hour' | 'day'; tz: string;
  totals: Counts; rates: Rates; series: ({ at: string } & Counts)[];
};

/** Series points per answer at most: a range that needs more is refused (422). */
export const MAX_POINTS = 2_000;

/** Percent with two decimals; null when the denominator is zero. */
export function rate(n: number, d: number): number | null {
  return d > 0 ? Math.round((n * 10_000) / d) / 100 : null;
}

/** The rates, one definition everywhere (docs/glossary.md). */
export function ratesOf(t: Counts): Rates {
  const bounced = t.bounced_hard + t.bounced_soft;
  const reached = t.sent - bounced;
  return {
    delivery: rate(reached, t.sent),
    bounce: rate(bounced, t.sent),
    human_open: rate(t.opened_human, reached),
    human_click: rate(t.clicked_human, reached),
    click_to_open: rate(t.clicked_human, t.opened_human),
    unsubscribe: rate(t.unsubscribed, reached),
    complaint: rate(t.complained, reached),
  };
}

export const zeroCounts = (): Counts => Object.fromEntries(STATS_KEYS.map((k) => [k, 0])) as Counts;

function scopeSql(scope: StatsScope) {
  switch (scope.kind) {
    case 'campaign': return sql`source = 'campaign' AND campaign_id = ${scope.id}::uuid`;
    case 'transactional': return sql`source = 'transactional'`;
    case 'account': return sql`mail_account_id = ${scope.id}::uuid`;
    case 'team': return sql`true`;
  }
}

let zones: Set<string> | undefined;
/** Whether PostgreSQL knows the IANA zone (its list, read once). */
export async function knownZone(db: Db, tz: string): Promise<boolean> {
  if (!zones) {
    const { rows } = await sql<{ name: string }>`SELECT name FROM pg_timezone_names`.execute(db);
    zones = new Set(rows.map((r) => r.name));
  }
  return zones.has(tz);
}

/**
 * The range [from, to) widened to whole slots of the interval in `tz`, and
 * the number of slots; computed by PostgreSQL in that zone (DST included).
 */
export async function alignRange(db: Db, from: Date, to: Date, interval: 'hour' | 'day', tz: string): Promise<{ from: Date; to: Date; points: number }> {
  if (tz === 'UTC') {
    // UTC has no DST: whole hours and days are fixed lengths, no database round trip.
    const step = interval === 'hour' ? 3_600_000 : 86_400_000;
    const f = Math.floor(from.getTime() / step) * step;
    const t = Math.ceil(to.getTime() / step) * step;
    return { from: new Date(f), to: new Date(t), points: (t - f) / step };
  }
  return db.transaction().execute(async (trx) => {
    await sql`SELECT set_config('TimeZone', ${tz}, true)`.execute(trx);
    const unit = sql.lit(interval);
    const { rows } = await sql<{ from: Date; to: Date; points: number }>`
      WITH r AS (
        SELECT date_trunc(${unit}, ${from}::timestamptz) AS f,
               CASE WHEN date_trunc(${unit}, ${to}::timestamptz) = ${to}::timestamptz THEN ${to}::timestamptz
                    ELSE date_trunc(${unit}, ${to}::timestamptz) + ${sql.lit(`1 ${interval}`)}::interval END AS t
      )
      SELECT f AS from, t AS to,
             CASE WHEN ${unit} = 'hour' THEN ceil(extract(epoch FROM t - f) / 3600)
                  ELSE (t::date - f::date) END::int AS points
        FROM r`.execute(trx);
    return rows[0]!;
  });
}

/** Totals, rates and the series of one scope of a team over an aligned range (alignRange). */
export async function readStats(
  db: Db, teamId: string, scope: StatsScope, range: { from: Date; to: Date }, interval: 'hour' | 'day', tz: string,
): Promise<StatsAnswer> {
  const cols = sql.raw(STATS_KEYS.join(', '));
  const sums = sql.raw(STATS_KEYS.map((k) => `coalesce(sum(${k}), 0)::float8 AS ${k}`).join(', '));
  const where = sql`team_id = ${teamId}::uuid AND ${scopeSql(scope)} AND bucket >= ${range.from}::timestamptz AND bucket < ${range.to}::timestamptz`;
  const unit = sql.lit(interval);
  // In UTC one statement, without a transaction (the dashboard's panels); in another zone the
  // session's TimeZone is set for the transaction, so date_trunc and the series follow its DST.
  const utc = tz === 'UTC';
  const trunc = utc ? sql`date_trunc(${unit}, bucket, 'UTC')` : sql`date_trunc(${unit}, bucket)`;
  const step = utc ? sql.lit(interval === 'hour' ? '1 hour' : '24 hours') : sql.lit(`1 ${interval}`);
  const statement = sql<{ at: Date } & Counts>`
      WITH raw AS (
        SELECT bucket, ${cols} FROM stats_buckets WHERE ${where}
        UNION ALL
        SELECT bucket, ${cols} FROM stats_deltas WHERE ${where}
      ), points AS (
        SELECT ${trunc} AS at, ${sums} FROM raw GROUP BY 1
      ), slots AS (
        SELECT generate_series(${range.from}::timestamptz, ${range.to}::timestamptz - interval '1 second', ${step}::interval) AS at
      )
      SELECT s.at, ${sql.raw(STATS_KEYS.map((k) => `coalesce(p.${k}, 0) AS ${k}`).join(', '))}
        FROM slots s LEFT JOIN points p ON p.at = s.at
       ORDER BY s.at`;
  const rows = utc ? (await statement.execute(db)).rows : await db.transaction().execute(async (trx) => {
    await sql`SELECT set_config('TimeZone', ${tz}, true)`.execute(trx);
    return (await statement.execute(trx)).rows;
  });
  const totals = zeroCounts();
  const series = rows.map((r) => {
    const point = { at: r.at.toISOString() } as { at: string } & Counts;
    for (const k of STATS_KEYS) {
      point[k] = Number(r[k]);
      totals[k] += point[k];
    }
    return point;
  });
  return { from: range.from.toISOString(), to: range.to.toISOString(), interval, tz, totals, rates: ratesOf(totals), series };
}

export type BreakdownRow = { kind: 'campaign' | 'transactional' | 'account'; id: string | null; totals: Counts; rates: Rates };

/**
 * Totals per campaign, for transactional mail and per mail account over
 * [from, to): the overview's table. Campaigns and accounts with nothing
 * counted in the range are left out; at most `limit` of each, most sent first.
 */
export async function breakdown(db: Db, teamId: string, from: Date, to: Date, limit = 50): Promise<BreakdownRow[]> {
  const cols = sql.raw(['source', 'campaign_id', 'mail_account_id', ...STATS_KEYS].join(', '));
  const sums = sql.raw(STATS_KEYS.map((k) => `sum(${k})::float8 AS ${k}`).join(', '));
  const where = sql`team_id = ${teamId}::uuid AND bucket >= ${from}::timestamptz AND bucket < ${to}::timestamptz`;
  const { rows } = await sql<{ kind: BreakdownRow['kind']; id: string | null } & Counts>`
    WITH raw AS (
      SELECT ${cols} FROM stats_buckets WHERE ${where}
      UNION ALL
      SELECT ${cols} FROM stats_deltas WHERE ${where}
    ), by_source AS (
      SELECT CASE WHEN source = 'campaign' THEN 'campaign' ELSE 'transactional' END AS kind,
             CASE WHEN source = 'campaign' THEN campaign_id END AS id, ${sums}
        FROM raw GROUP BY 1, 2 ORDER BY sum(sent) DESC LIMIT ${limit + 1}
    ), by_account AS (
      SELECT 'account' AS kind, mail_account_id AS id, ${sums}
        FROM raw WHERE mail_account_id IS NOT NULL GROUP BY 2 ORDER BY sum(sent) DESC LIMIT ${limit}
    )
    SELECT * FROM by_source UNION ALL SELECT * FROM by_account`.execute(db);
  return rows.map((r) => {
    const totals = zeroCounts();
    for (const k of STATS_KEYS) totals[k] = Number(r[k]);
    return { kind: r.kind, id: r.id, totals, rates: ratesOf(totals) };
  });
}
