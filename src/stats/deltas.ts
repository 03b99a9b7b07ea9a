// Adding to the mail statistics: every writer of a counted fact (a message
// handed to a relay, a bounce, a delivery report, a deferral, the first open
// or click of a verdict, an unsubscribe from a message, a complaint, a reply)
// adds delta rows in the transaction that records the fact, so a rolled-back
// write counts nothing and a committed one counts once. The stats_fold job
// moves them into 15-minute buckets (fold.ts); reads add both (read.ts).
//
// The message's source, campaign and mail account come from its log row,
// read in the same INSERT ... SELECT: callers pass ids, not copies.
import { sql, type Transaction } from 'kysely';
import { PREPARED, type Db } from '../db/pool.ts';
import { recordset } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';
import { STATS_KEYS, type StatsKey } from '../db/schema-stats.ts';

type Tx = Transaction<Database>;

/** Bucket width. Every time zone's offset is a multiple of it, so hours and days are whole buckets. */
export const BUCKET_MINUTES = 15;
export const BUCKET_SQL = sql.raw(`'${BUCKET_MINUTES} minutes'`);
/** The bucket a time falls in (SQL), aligned to UTC quarter hours. */
export const bucketOf = (at: ReturnType<typeof sql>) =>
  sql`date_bin(${BUCKET_SQL}::interval, ${at}, TIMESTAMPTZ '2000-01-01 00:00:00+00')`;

/** One fact about one message: `key` moves by `by` (default 1) at `at`. */
export type MessageFact = { messageId: string; key: StatsKey; at: Date | string; by?: number };

/**
 * Adds facts about messages, one INSERT for the whole list: rows of one
 * message, bucket and key are summed. Facts naming a message that no longer
 * exists (purged) count nothing.
 */
export async function addMessageFacts(db: Db | Tx, facts: MessageFact[]): Promise<void> {
  const list = facts.filter((f) => (f.by ?? 1) !== 0);
  if (list.length === 0) return;
  const cols = sql.raw(STATS_KEYS.join(', '));
  const sums = sql.raw(STATS_KEYS.map((k) => `sum(CASE WHEN x.key = '${k}' THEN x.by ELSE 0 END)::int`).join(', '));
  await sql`${sql.raw(PREPARED)}
    INSERT INTO stats_deltas (team_id, source, campaign_id, mail_account_id, bucket, ${cols})
    SELECT l.team_id, l.source, l.campaign_id, l.mail_account_id, ${bucketOf(sql`x.at`)}, ${sums}
      FROM ${recordset(JSON.stringify(list.map((f) => ({
        id: f.messageId, key: f.key, by: f.by ?? 1, at: f.at instanceof Date ? f.at.toISOString() : f.at,
      }))), list.length, 'x (id uuid, key text, by int, at timestamptz)')} AS x
      JOIN email_send_log l ON l.id = x.id
     GROUP BY 1, 2, 3, 4, 5`.execute(db);
}

/**
 * An unsubscribe from a message's link counts for that message; from a
 * recipient-signed link (which names no message) for the latest message the
 * team sent to the address. Only an unsubscribe that changed the contact
 * counts (a second click does not).
 */
export async function addUnsubscribeFact(db: Db | Tx, teamId: string, email: string, messageId: string | null): Promise<void> {
  await sql`
    INSERT INTO stats_deltas (team_id, source, campaign_id, mail_account_id, bucket, unsubscribed)
    SELECT l.team_id, l.source, l.campaign_id, l.mail_account_id, ${bucketOf(sql`now()`)}, 1
      FROM email_send_log l
     WHERE l.team_id = ${teamId}::uuid
       AND l.id = coalesce(${messageId}::uuid, (
             SELECT m.id FROM email_send_log m
              WHERE m.team_id = ${teamId}::uuid AND m.email = ${email} AND m.sent_at IS NOT NULL
              ORDER BY m.sent_at DESC LIMIT 1))`.execute(db);
}
