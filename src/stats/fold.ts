// The stats_fold job (cron, every minute): moves delta rows into their
// 15-minute buckets. One transaction per FOLD_BATCH deltas: DELETE ...
// RETURNING, summed per bucket, upserted. A concurrent reader sees either the
// deltas or the buckets they went into, never both (one statement, one
// snapshot), so answers stay exact while a fold runs. Folds do not overlap (a
// transaction-level advisory lock; a second run finds it taken and leaves).
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { STATS_KEYS } from '../db/schema-stats.ts';
import { JOB_PRIORITY, type JobName } from '../lib/jobs.ts';

export const STATS_FOLD_CRON = `* * * * * ${'stats_fold' satisfies JobName} ?max=1&priority=${JOB_PRIORITY.background}`;
/** Deltas folded per transaction. */
export const FOLD_BATCH = 50_000;
/** pg advisory lock key of the fold ("stat" in ASCII). */
const FOLD_LOCK = 0x73746174;

/** Folds every delta present when it starts; returns the number folded. */
export async function foldStats(db: Db, batch = FOLD_BATCH): Promise<number> {
  let total = 0;
  const { rows: top } = await sql<{ max: string | null }>`SELECT max(id)::text AS max FROM stats_deltas`.execute(db);
  const upTo = top[0]?.max;
  if (!upTo) return 0;
  const cols = sql.raw(STATS_KEYS.join(', '));
  const sums = sql.raw(STATS_KEYS.map((k) => `sum(${k}) AS ${k}`).join(', '));
  const adds = sql.raw(STATS_KEYS.map((k) => `${k} = stats_buckets.${k} + EXCLUDED.${k}`).join(', '));
  for (;;) {
    const n = await db.transaction().execute(async (trx) => {
      const { rows: lock } = await sql<{ ok: boolean }>`SELECT pg_try_advisory_xact_lock(${FOLD_LOCK}) AS ok`.execute(trx);
      if (!lock[0]?.ok) return -1;
      const { rows } = await sql<{ n: number }>`
        WITH d AS (
          DELETE FROM stats_deltas WHERE id IN (
            SELECT id FROM stats_deltas WHERE id <= ${upTo}::bigint ORDER BY id LIMIT ${batch})
          RETURNING *
        ), summed AS (
          SELECT team_id, source, campaign_id, mail_account_id, bucket, ${sums}, count(*) AS n
            FROM d GROUP BY team_id, source, campaign_id, mail_account_id, bucket
        ), up AS (
          INSERT INTO stats_buckets (team_id, source, campaign_id, mail_account_id, bucket, ${cols})
          SELECT team_id, source, campaign_id, mail_account_id, bucket, ${cols} FROM summed
           ORDER BY team_id, source, campaign_id, mail_account_id, bucket
          ON CONFLICT ON CONSTRAINT stats_buckets_key DO UPDATE SET ${adds}
        )
        SELECT coalesce(sum(n), 0)::int AS n FROM summed`.execute(trx);
      return rows[0]?.n ?? 0;
    });
    if (n < 0) return total;
    total += n;
    if (n < batch) return total;
  }
}
