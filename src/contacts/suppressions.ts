// The team's suppression list (one table for every send path): who must not be
// mailed, and why. An unsubscribe stops marketing only; every other reason (a
// hard bounce, repeated soft bounces, a complaint, a manual entry, an erasure)
// stops every message, transactional ones included.
//
// One row per address holds the strongest reason (`reason`, the one in force)
// and every reason ever recorded for it (`reasons`, strongest first), so that
// removing a team's own entry falls back to what the recipient asked for
// instead of freeing the address (removeSuppression).
import { createHmac } from 'node:crypto';
import { sql, type Transaction } from 'kysely';
import { PREPARED, type Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { recordset } from '../db/recordset.ts';
import { AppError } from '../lib/errors.ts';
import { paginate } from '../lib/paginate.ts';
import { escapeLike, normalizeEmail } from '../lib/text.ts';

export type SuppressionReason = 'unsubscribed' | 'soft_bounce' | 'manual' | 'bounced_hard' | 'complained' | 'erased';

// Weakest first. One row per address keeps the strongest reason: a hard bounce
// after an unsubscribe must start blocking transactional mail; an unsubscribe
// after a hard bounce must not lift it.
export const SUPPRESSION_REASONS: SuppressionReason[] = ['unsubscribed', 'soft_bounce', 'manual', 'bounced_hard', 'complained', 'erased'];
const STRENGTH = SUPPRESSION_REASONS;

/** Reasons that stop transactional mail too: all but an unsubscribe, which stops marketing only. */
export const ALL_MAIL_REASONS: SuppressionReason[] = ['soft_bounce', 'manual', 'bounced_hard', 'complained', 'erased'];

/** Reasons a client may give when adding entries (soft_bounce and erased are the system's own). */
export const CLIENT_REASONS = ['manual', 'unsubscribed', 'bounced_hard', 'complained'] as const;
export type ClientReason = (typeof CLIENT_REASONS)[number];

/**
 * Reasons a team may remove: its own judgement or the system's, about the
 * address. `unsubscribed`, `complained` and `erased` are the recipient's own
 * acts; no team removes them, so no team can re-subscribe anyone.
 */
export const REMOVABLE_REASONS: SuppressionReason[] = ['manual', 'bounced_hard', 'soft_bounce'];

/** The contact status an added reason gives an `active` contact (contacts.status mirrors the list). */
const CONTACT_STATUS: Partial<Record<SuppressionReason, string>> = {
  unsubscribed: 'unsubscribed', bounced_hard: 'bounced', complained: 'complained',
};

/**
 * SQL: the status a contact of (team, email) takes from the suppression list
 * (NULL: none), for a contact written after its address was listed. The
 * recipient's own acts and bounces mirror (complained, then bounced, then
 * unsubscribed, among every reason recorded for the address); manual and
 * soft-bounce entries leave it active, and an erased address's keyed hash
 * mirrors nothing (the hash still stops every message). One probe of the
 * (team_id, email) index per row.
 */
export const suppressedStatusSql = (team: string, email: string) => `(
    SELECT CASE WHEN 'complained' = ANY (s.reasons || s.reason) THEN 'complained'
                WHEN 'bounced_hard' = ANY (s.reasons || s.reason) THEN 'bounced'
                WHEN 'unsubscribed' = ANY (s.reasons || s.reason) THEN 'unsubscribed' END
      FROM suppressions s WHERE s.team_id = ${team} AND s.email = ${email})`;

const strength = (r: string): number => STRENGTH.indexOf(r as SuppressionReason);
const strongestFirst = (reasons: Iterable<string>): SuppressionReason[] =>
  ([...new Set(reasons)] as SuppressionReason[]).sort((a, b) => strength(b) - strength(a));

/** The keyed hash an erased address is kept as (the address itself is not). */
export function emailHmac(secret: string, email: string): string {
  return createHmac('sha256', secret).update(`plover:suppression:${normalizeEmail(email)}`).digest('hex');
}

type Tx = Transaction<Database>;

/**
 * Adds (or strengthens) suppressions, set-based, in the caller's transaction:
 * the strongest reason is in force, and every reason given is remembered.
 * Answers the rows it inserted or changed (an address already holding the
 * reason is left as it is).
 */
export async function suppress(
  tx: Tx | Db,
  rows: { team_id: string; email: string; reason: SuppressionReason; message_id?: string | null }[],
): Promise<{ team_id: string; email: string; inserted: boolean }[]> {
  if (rows.length === 0) return [];
  // One row per (team, address) in the statement: ON CONFLICT cannot touch a
  // row twice. The weaker reasons given for it are still remembered.
  const byKey = new Map<string, (typeof rows)[number] & { all: Set<SuppressionReason> }>();
  for (const r of rows) {
    const key = `${r.team_id}|${normalizeEmail(r.email)}`;
    const prev = byKey.get(key);
    if (!prev) byKey.set(key, { ...r, all: new Set([r.reason]) });
    else {
      prev.all.add(r.reason);
      if (strength(r.reason) > strength(prev.reason)) Object.assign(prev, { reason: r.reason, message_id: r.message_id });
    }
  }
  // Sorted: concurrent writers take the index's row locks in one order.
  const list = [...byKey.values()]
    .map((r) => ({ team_id: r.team_id, email: normalizeEmail(r.email), reason: r.reason, reasons: strongestFirst(r.all), message_id: r.message_id ?? null }))
    .sort((a, b) => (a.team_id + a.email < b.team_id + b.email ? -1 : 1));
  const { rows: changed } = await sql<{ team_id: string; email: string; inserted: boolean }>`
    INSERT INTO suppressions AS s (team_id, email, reason, reasons, message_id)
    SELECT x.team_id, x.email, x.reason, ARRAY(SELECT jsonb_array_elements_text(x.reasons)), x.message_id
      FROM jsonb_to_recordset(${JSON.stringify(list)}::jsonb) AS x (team_id uuid, email text, reason text, reasons jsonb, message_id uuid)
    ON CONFLICT (team_id, email) WHERE email IS NOT NULL DO UPDATE
       SET reason = CASE WHEN array_position(${STRENGTH}::text[], EXCLUDED.reason) > array_position(${STRENGTH}::text[], s.reason)
                         THEN EXCLUDED.reason ELSE s.reason END,
           message_id = CASE WHEN array_position(${STRENGTH}::text[], EXCLUDED.reason) > array_position(${STRENGTH}::text[], s.reason)
                             THEN EXCLUDED.message_id ELSE s.message_id END,
           reasons = ARRAY(SELECT u.r FROM unnest(s.reasons || s.reason || EXCLUDED.reasons) AS u (r)
                            GROUP BY u.r ORDER BY array_position(${STRENGTH}::text[], u.r) DESC),
           updated_at = now()
     WHERE array_position(${STRENGTH}::text[], EXCLUDED.reason) > array_position(${STRENGTH}::text[], s.reason)
        OR NOT (s.reasons @> (EXCLUDED.reasons || s.reason))
    RETURNING s.team_id, s.email, (s.xmax = 0) AS inserted`.execute(tx);
  return changed;
}

/**
 * Of these addresses, those soft-bounced at least `limit` times within `days`
 * (the `soft_bounce` suppression): by a DSN or provider report
 * (message_feedback) or given up at SMTP time after the retries (a message
 * `bounced_soft`, counted at its bounced_at); a message reported both ways
 * counts once, at its report's time.
 */
export async function overSoftBounceLimit(
  tx: Tx | Db,
  addrs: { team_id: string; email: string }[],
  limit: number,
  days: number,
): Promise<{ team_id: string; email: string }[]> {
  if (addrs.length === 0) return [];
  const unique = [...new Map(addrs.map((a) => [`${a.team_id}|${a.email}`, { team_id: a.team_id, email: a.email }])).values()];
  const { rows } = await sql<{ team_id: string; email: string }>`
    SELECT x.team_id, x.email
      FROM jsonb_to_recordset(${JSON.stringify(unique)}::jsonb) AS x (team_id uuid, email text)
     WHERE (SELECT count(*) FROM (
              SELECT f.email_send_log_id FROM message_feedback f
               WHERE f.team_id = x.team_id AND f.email = x.email AND f.kind = 'bounce_soft'
                 AND f.occurred_at > now() - make_interval(days => ${days})
              UNION
              SELECT l.id FROM email_send_log l
               WHERE l.team_id = x.team_id AND l.email = x.email AND l.status = 'bounced_soft'
                 AND l.bounced_at > now() - make_interval(days => ${days})
                 -- A reported one counts at its report's time, above.
                 AND NOT EXISTS (SELECT 1 FROM message_feedback f WHERE f.email_send_log_id = l.id AND f.kind = 'bounce_soft')) AS s) >= ${limit}`.execute(tx);
  return rows;
}

/**
 * The addresses among `emails` that no message may go to (ALL_MAIL_REASONS),
 * matched in clear or by their keyed hash (erased addresses).
 */
export async function suppressedForAllMail(db: Db | Tx, teamId: string, emails: string[], secret: string): Promise<Set<string>> {
  if (emails.length === 0) return new Set();
  const unique = [...new Set(emails)];
  // Prepared, the addresses a sized recordset (src/db/recordset.ts): a lone
  // transactional submit runs this for one address, and unnest() of an array
  // kept it on a custom plan, planned at every call.
  const list = JSON.stringify(unique.map((email) => ({ email, hmac: emailHmac(secret, email) })));
  const { rows } = await sql<{ email: string }>`${sql.raw(PREPARED)}
    SELECT i.email FROM ${recordset(list, unique.length, 'i (email text, hmac text)')} AS i
     WHERE EXISTS (SELECT 1 FROM suppressions s
                    WHERE s.team_id = ${teamId} AND s.reason = ANY (${ALL_MAIL_REASONS}::text[])
                      AND (s.email = i.email OR s.email_hmac = i.hmac))`.execute(db);
  return new Set(rows.map((r) => r.email));
}

/**
 * The strongest suppression in force for each (team, address), matched in
 * clear or by the keyed hash (erased addresses), among `reasons`. Keys are
 * `team_id|email`. Without a secret only clear addresses match.
 */
export async function suppressionsInForce(
  db: Db | Tx,
  pairs: { team_id: string; email: string }[],
  secret: string | undefined,
  reasons: readonly SuppressionReason[] = STRENGTH,
): Promise<Map<string, SuppressionReason>> {
  const keys = [...new Map(pairs.map((p) => [`${p.team_id}|${p.email}`, p])).values()];
  if (keys.length === 0) return new Map();
  const { rows } = await sql<{ team_id: string; email: string; reason: SuppressionReason }>`
    SELECT i.team_id, i.email, r.reason
      FROM unnest(${keys.map((k) => k.team_id)}::uuid[], ${keys.map((k) => k.email)}::text[],
                  ${keys.map((k) => (secret ? emailHmac(secret, k.email) : null))}::text[]) AS i (team_id, email, hmac)
     CROSS JOIN LATERAL (
       SELECT s.reason FROM suppressions s
        WHERE s.team_id = i.team_id AND (s.email = i.email OR s.email_hmac = i.hmac) AND s.reason = ANY (${reasons}::text[])
        ORDER BY array_position(${STRENGTH}::text[], s.reason) DESC LIMIT 1
     ) r`.execute(db);
  return new Map(rows.map((r) => [`${r.team_id}|${r.email}`, r.reason]));
}

export type SuppressionRow = {
  id: string;
  email: string | null;
  reason: SuppressionReason;
  reasons: string[];
  message_id: string | null;
  created_at: Date;
  updated_at: Date;
};

/** An entry as the API and the dashboard show it: an erased one has `email: null`. */
export function suppressionView(r: SuppressionRow) {
  return {
    id: r.id,
    email: r.email,
    reason: r.reason,
    // Rows written before the memory existed, or by a writer that set `reason` alone, still show it.
    reasons: strongestFirst([r.reason, ...(r.reasons ?? [])]),
    message_id: r.message_id,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}

export type SuppressionFilter = {
  page: number;
  perPage: number;
  reason?: SuppressionReason;
  /** An e-mail prefix, lower-cased; erased entries (no address) never match one. */
  search?: string;
  createdFrom?: Date;
  createdTo?: Date;
};

const COLUMNS = sql`id, email, reason, reasons, message_id, created_at, updated_at`;

/** A page of the team's list, newest first (created_at DESC, id DESC). */
export async function listSuppressions(db: Db, teamId: string, f: SuppressionFilter): Promise<{ rows: SuppressionRow[]; total: number }> {
  const where = [sql`team_id = ${teamId}`];
  if (f.reason) where.push(sql`reason = ${f.reason}`);
  if (f.search) where.push(sql`email LIKE ${escapeLike(f.search) + '%'}`);
  if (f.createdFrom) where.push(sql`created_at >= ${f.createdFrom}`);
  if (f.createdTo) where.push(sql`created_at < ${f.createdTo}`);
  const cond = sql.join(where, sql` AND `);
  return paginate(
    f,
    async () => (await sql<{ n: string }>`SELECT count(*) AS n FROM suppressions WHERE ${cond}`.execute(db)).rows[0]!.n,
    async (limit, offset) =>
      (await sql<SuppressionRow>`
        SELECT ${COLUMNS} FROM suppressions WHERE ${cond}
         ORDER BY created_at DESC, id DESC LIMIT ${limit} OFFSET ${offset}`.execute(db)).rows,
  );
}

/**
 * Adds entries for a team (addresses already normalised and validated), in
 * the caller's transaction, set-based: contacts of the team that are `active`
 * take the status the strongest such reason given for them mirrors
 * (unsubscribed, bounced, complained; a manual entry leaves the status alone),
 * then the list is written. Contacts
 * are locked before suppressions, in id order, as the send recorder does.
 * Answers the entries as stored, one per address in the order first given.
 */
export async function addSuppressions(
  tx: Tx,
  teamId: string,
  items: { email: string; reason: ClientReason }[],
): Promise<{ added: number; updated: number; unchanged: number; contacts_changed: number; entries: SuppressionRow[] }> {
  // Per address, the strongest reason given that a contact status mirrors
  // (manual mirrors none: `unsubscribed` and `manual` together unsubscribe).
  const mirrored = new Map<string, SuppressionReason | null>();
  for (const { email, reason } of items) {
    const prev = mirrored.get(email) ?? null;
    const next = CONTACT_STATUS[reason] && (!prev || strength(reason) > strength(prev)) ? reason : prev;
    mirrored.set(email, next);
  }
  const emails = [...mirrored.keys()];
  const mirror = emails.flatMap((email) => {
    const reason = mirrored.get(email);
    return reason ? [{ email, status: CONTACT_STATUS[reason]! }] : [];
  });
  let contactsChanged = 0;
  if (mirror.length > 0) {
    const res = await sql`
      WITH x AS (SELECT * FROM ${recordset(JSON.stringify(mirror), mirror.length, 'x (email text, status text)')} AS x),
      locked AS (
        SELECT k.id FROM contacts k JOIN x ON k.email = x.email
         WHERE k.team_id = ${teamId} AND k.status = 'active' ORDER BY k.id FOR NO KEY UPDATE
      )
      UPDATE contacts k SET status = x.status, updated_at = now(),
             unsubscribed_at = CASE WHEN x.status = 'unsubscribed' THEN now() ELSE k.unsubscribed_at END
        FROM x
       WHERE k.team_id = ${teamId} AND k.email = x.email AND k.status = 'active' AND k.id IN (SELECT id FROM locked)`.execute(tx);
    contactsChanged = Number(res.numAffectedRows ?? 0);
  }
  // Every reason given is remembered, not only the strongest of the request.
  const changed = await suppress(tx, items.map((i) => ({ team_id: teamId, email: i.email, reason: i.reason })));
  const added = changed.filter((c) => c.inserted).length;
  const { rows } = await sql<SuppressionRow>`
    SELECT ${COLUMNS} FROM suppressions WHERE team_id = ${teamId} AND email = ANY (${emails}::text[])`.execute(tx);
  const byEmail = new Map(rows.map((r) => [r.email!, r]));
  return {
    added,
    updated: changed.length - added,
    unchanged: emails.length - changed.length,
    contacts_changed: contactsChanged,
    entries: emails.map((e) => byEmail.get(e)!),
  };
}

/**
 * Removes what a team may remove for an address (REMOVABLE_REASONS), matched
 * in clear or by its keyed hash. An entry whose reason in force is the
 * recipient's own (unsubscribed, complained, erased) stays: CONFLICT when
 * nothing could be removed. An entry that also remembers an unsubscribe falls
 * back to it instead of going. A contact `bounced` by a removed hard bounce
 * becomes `active` again (or `unsubscribed`, when that remains); no other
 * status changes. Null when the team has no entry for the address.
 */
export async function removeSuppression(
  tx: Tx,
  teamId: string,
  email: string,
  secret: string,
): Promise<{ removed: SuppressionReason[]; remaining: SuppressionRow | null } | null> {
  const hmac = emailHmac(secret, email);
  // The contact first, as every writer of both tables locks them.
  const contact = (await sql<{ id: string; status: string }>`
    SELECT id, status FROM contacts WHERE team_id = ${teamId} AND email = ${email} FOR NO KEY UPDATE`.execute(tx)).rows[0];
  const { rows } = await sql<SuppressionRow & { email_hmac: string | null }>`
    SELECT ${COLUMNS}, email_hmac FROM suppressions
     WHERE team_id = ${teamId} AND (email = ${email} OR email_hmac = ${hmac})
     ORDER BY id FOR UPDATE`.execute(tx);
  if (rows.length === 0) return null;

  const removed = new Set<SuppressionReason>();
  const kept: SuppressionRow[] = [];
  for (const row of rows) {
    const recorded = strongestFirst([row.reason, ...(row.reasons ?? [])]);
    if (!REMOVABLE_REASONS.includes(row.reason)) {
      kept.push(row);
      continue;
    }
    const left = recorded.filter((r) => !REMOVABLE_REASONS.includes(r));
    for (const r of recorded) if (REMOVABLE_REASONS.includes(r)) removed.add(r);
    if (left.length === 0) {
      await sql`DELETE FROM suppressions WHERE id = ${row.id}`.execute(tx);
    } else {
      // What the recipient did stays in force; the message that caused the removed entry is not its cause.
      const { rows: after } = await sql<SuppressionRow>`
        UPDATE suppressions SET reason = ${left[0]}, reasons = ${left}::text[], message_id = NULL, updated_at = now()
         WHERE id = ${row.id} RETURNING ${COLUMNS}`.execute(tx);
      kept.push(after[0]!);
    }
  }
  if (removed.size === 0) {
    const reason = strongestFirst(rows.map((r) => r.reason))[0]!;
    throw new AppError('CONFLICT', `the address is suppressed as ${reason}, which the recipient caused; a team cannot remove it`);
  }
  const remaining = kept.sort((a, b) => strength(b.reason) - strength(a.reason))[0] ?? null;
  // The hard bounce was the contact's only block: it may be mailed again (or stays unsubscribed).
  if (contact?.status === 'bounced' && removed.has('bounced_hard') && (!remaining || remaining.reason === 'unsubscribed')) {
    await sql`UPDATE contacts SET status = ${remaining ? 'unsubscribed' : 'active'}, updated_at = now() WHERE id = ${contact.id}`.execute(tx);
  }
  return { removed: strongestFirst(removed), remaining };
}
