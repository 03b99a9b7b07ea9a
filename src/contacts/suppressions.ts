// The team's suppression list (one table for every send path): who must not be
// mailed, and why. An unsubscribe stops marketing only; a hard bounce, a
// complaint, a manual entry or an erasure stop every message, transactional
// ones included.
import { createHmac } from 'node:crypto';
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { normalizeEmail } from '../lib/text.ts';

export type SuppressionReason = 'unsubscribed' | 'soft_bounce' | 'manual' | 'bounced_hard' | 'complained' | 'erased';

/** Reasons that stop transactional mail too (an unsubscribe or soft bounces stop marketing only). */
export const ALL_MAIL_REASONS: SuppressionReason[] = ['bounced_hard', 'complained', 'manual', 'erased'];

// One row per address keeps the strongest reason: a hard bounce after an
// unsubscribe must start blocking transactional mail; an unsubscribe after a
// hard bounce must not lift it.
const STRENGTH: SuppressionReason[] = ['unsubscribed', 'soft_bounce', 'manual', 'bounced_hard', 'complained', 'erased'];

/** The keyed hash an erased address is kept as (the address itself is not). */
export function emailHmac(secret: string, email: string): string {
  return createHmac('sha256', secret).update(`plover:suppression:${normalizeEmail(email)}`).digest('hex');
}

type Tx = Transaction<Database>;

/** Adds (or strengthens) suppressions, set-based, in the caller's transaction. */
export async function suppress(
  tx: Tx | Db,
  rows: { team_id: string; email: string; reason: SuppressionReason; message_id?: string | null }[],
): Promise<void> {
  if (rows.length === 0) return;
  // One row per (team, address) in the statement: ON CONFLICT cannot touch a row twice.
  const byKey = new Map<string, (typeof rows)[number]>();
  for (const r of rows) {
    const key = `${r.team_id}|${r.email}`;
    const prev = byKey.get(key);
    if (!prev || STRENGTH.indexOf(r.reason) > STRENGTH.indexOf(prev.reason)) byKey.set(key, r);
  }
  // Sorted: concurrent writers take the index's row locks in one order.
  const list = [...byKey.values()]
    .sort((a, b) => (a.team_id + a.email < b.team_id + b.email ? -1 : 1))
    .map((r) => ({ team_id: r.team_id, email: normalizeEmail(r.email), reason: r.reason, message_id: r.message_id ?? null }));
  await sql`
    INSERT INTO suppressions AS s (team_id, email, reason, message_id)
    SELECT x.team_id, x.email, x.reason, x.message_id
      FROM jsonb_to_recordset(${JSON.stringify(list)}::jsonb) AS x (team_id uuid, email text, reason text, message_id uuid)
    ON CONFLICT (team_id, email) WHERE email IS NOT NULL DO UPDATE
       SET reason = EXCLUDED.reason, message_id = EXCLUDED.message_id, updated_at = now()
     WHERE array_position(${STRENGTH}::text[], EXCLUDED.reason) > array_position(${STRENGTH}::text[], s.reason)`.execute(tx);
}

/**
 * The addresses among `emails` that no message may go to (ALL_MAIL_REASONS),
 * matched in clear or by their keyed hash (erased addresses).
 */
export async function suppressedForAllMail(db: Db | Tx, teamId: string, emails: string[], secret: string): Promise<Set<string>> {
  if (emails.length === 0) return new Set();
  const unique = [...new Set(emails)];
  const hmacs = unique.map((e) => emailHmac(secret, e));
  const { rows } = await sql<{ email: string }>`
    SELECT i.email FROM unnest(${unique}::text[], ${hmacs}::text[]) AS i (email, hmac)
     WHERE EXISTS (SELECT 1 FROM suppressions s
                    WHERE s.team_id = ${teamId} AND s.reason = ANY (${ALL_MAIL_REASONS}::text[])
                      AND (s.email = i.email OR s.email_hmac = i.hmac))`.execute(db);
  return new Set(rows.map((r) => r.email));
}
