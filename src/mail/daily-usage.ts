// Daily limits of mail accounts, counted at claim time in `mail_account_usage`
// (one row per account and UTC day).
//
// Why reservations: counting each claim on that row made every claim of an
// account wait for the previous claim's durable commit (the row lock is held
// until the commit is flushed). bench/campaigns.ts showed the claim statement
// at 17 ms per e-mail against 11 ms without the counter, the hottest statement
// of the run. A send job now reserves slots for its whole batch in one
// statement (never beyond the cap, so two workers cannot both take the last
// slot), claims its messages against them without touching the counter, and
// gives back what it did not use: two updates of the hot row per batch of up
// to 50, not one per message.
//
// A message of a job that got fewer slots than it asked for counts its own
// claim on the row, under the cap (it succeeds only if another job gave slots
// back), else waits for the next day. The count errs on the side of sending
// less: a worker that dies holding a reservation leaves its slots counted for
// the day.
import { sql } from 'kysely';
import { PREPARED, type Db } from '../db/pool.ts';
import { recordset } from '../db/recordset.ts';
import { sendPriority } from './send-record.ts';
import { JOB_PRIORITY, type JobName } from '../lib/jobs.ts';

export type Source = 'campaign' | 'transactional';

/**
 * Messages of this source the account may have claimed today: all of the
 * daily limit for transactional mail, the campaign share (default 90 %) for
 * campaign mail, so campaigns can never use up what password resets need.
 */
export function dailyCap(account: { daily_limit: number; campaign_share_percent: number }, source: Source): number {
  if (source === 'transactional') return account.daily_limit;
  return Math.floor((account.daily_limit * account.campaign_share_percent) / 100);
}

type Group = { accountId: string; teamId: string; source: Source; cap: number; wanted: number; day?: string; free: number };

/** The slots one send job reserved, per account and source; tokens are taken one per claim. */
export class Allowance {
  private readonly groups = new Map<string, Group>();

  /** Asks for one slot per message that may be claimed (in any order; reserve() sorts). */
  want(account: { id: string; daily_limit: number; campaign_share_percent: number }, teamId: string, source: Source): void {
    const key = `${account.id}:${source}`;
    const g = this.groups.get(key);
    if (g) g.wanted++;
    else this.groups.set(key, { accountId: account.id, teamId, source, cap: dailyCap(account, source), wanted: 1, free: 0 });
  }

  /**
   * One statement per account and source, in a fixed order. The row is
   * locked only for that statement's commit; the grant is what was left
   * under the cap, at most what was asked.
   */
  async reserve(db: Db): Promise<void> {
    // A lone message (a transactional submit's job, a retry) counts its own claim
    // in the claiming statement: a reservation would write the same row once and
    // add a statement and a commit (bench/transactional.ts: 8.5 ms per e-mail).
    const groups = [...this.groups.values()].filter((g) => g.wanted > 1)
      .sort((a, b) => (a.accountId + a.source < b.accountId + b.source ? -1 : 1));
    for (const g of groups) {
      const { rows } = await sql<{ day: string; last_grant: number }>`
        INSERT INTO mail_account_usage AS u (mail_account_id, day, team_id, claimed, last_grant)
        VALUES (${g.accountId}::uuid, (now() AT TIME ZONE 'UTC')::date, ${g.teamId}::uuid,
                least(${g.wanted}::int, ${g.cap}::int), least(${g.wanted}::int, ${g.cap}::int))
        ON CONFLICT (mail_account_id, day) DO UPDATE
          SET claimed = u.claimed + least(${g.wanted}::int, greatest(0, ${g.cap}::int - u.claimed)),
              last_grant = least(${g.wanted}::int, greatest(0, ${g.cap}::int - u.claimed))
        RETURNING to_char(day, 'YYYY-MM-DD') AS day, last_grant`.execute(db);
      g.day = rows[0]!.day;
      g.free = rows[0]!.last_grant;
    }
  }

  /** A reserved slot's UTC day, or null when the job's slots for this account and source are used up. */
  take(accountId: string, source: Source): string | null {
    const g = this.groups.get(`${accountId}:${source}`);
    if (!g?.day || g.free <= 0) return null;
    g.free--;
    return g.day;
  }

  /** A slot taken for a claim that did not happen. */
  putBack(accountId: string, source: Source): void {
    const g = this.groups.get(`${accountId}:${source}`);
    if (g) g.free++;
  }

  /** Gives the unused slots back to the day they were reserved for. */
  async release(db: Db): Promise<void> {
    for (const g of this.groups.values()) {
      if (!g.day || g.free <= 0) continue;
      await sql`
        UPDATE mail_account_usage SET claimed = greatest(0, claimed - ${g.free}::int)
         WHERE mail_account_id = ${g.accountId}::uuid AND day = ${g.day}::date`.execute(db);
      g.free = 0;
    }
  }
}

/**
 * Claims one message for SMTP (`queued`/`deferred` → `sending`), committed on
 * its own. With a slot of today (`slotDay`), the counter is not touched. With
 * none, or one of a day that has ended since the reservation, the claim counts
 * itself on today's row in the same statement, only while under the cap, so
 * no path claims beyond the limit.
 */
export async function claimForSmtp(
  db: Db, row: { id: string; team_id: string }, accountId: string, cap: number, slotDay: string | null,
): Promise<{ attempts: number } | undefined> {
  const { rows } = await sql<{ attempts: number }>`${sql.raw(PREPARED)}
    WITH today AS (SELECT (now() AT TIME ZONE 'UTC')::date AS day),
    bump AS (
      INSERT INTO mail_account_usage AS u (mail_account_id, day, team_id, claimed)
      SELECT ${accountId}::uuid, today.day, ${row.team_id}::uuid, 1 FROM today
       WHERE ${slotDay}::date IS DISTINCT FROM today.day AND ${cap}::int >= 1
         AND EXISTS (SELECT 1 FROM email_send_log WHERE id = ${row.id} AND status IN ('queued', 'deferred'))
      ON CONFLICT (mail_account_id, day) DO UPDATE SET claimed = u.claimed + 1 WHERE u.claimed < ${cap}::int
      RETURNING 1
    )
    UPDATE email_send_log SET status = 'sending', attempts = attempts + 1, claimed_at = now(), updated_at = now()
     WHERE id = ${row.id} AND status IN ('queued', 'deferred')
       AND (${slotDay}::date = (SELECT day FROM today) OR EXISTS (SELECT 1 FROM bump))
    RETURNING attempts`.execute(db);
  return rows[0];
}

/** One message of a claim batch: its row and the day of the slot it holds (null: none). */
export type ClaimItem = { id: string; slotDay: string | null };

/**
 * Claims several messages of one account and source (`cap`) in one statement
 * and one commit: what claimForSmtp does for one, for all of them. Messages
 * with a slot of today are claimed without touching the counter; the others
 * count on today's row together, one update for all of them, granted in the
 * order given and never beyond the cap. Answers, per item in order, the claim
 * (`{attempts}`) or undefined (not claimable any more, or over the limit).
 *
 * Why: every concurrent send of an account claimed with its own statement and
 * commit, and the messages without a reserved slot (lone messages: a
 * transactional submit, an event-triggered send) each took the account's
 * counter row, waiting in turn for the previous claim's durable commit. The
 * sends waiting for a claim now share one (src/mail/send.ts, claim batches).
 */
export async function claimManyForSmtp(
  db: Db, accountId: string, teamId: string, cap: number, items: ClaimItem[],
): Promise<({ attempts: number } | undefined)[]> {
  // One message twice in a batch (two jobs with the same message): only its
  // first item may claim it; the statement would answer both with its one row.
  const first = new Map<string, number>();
  items.forEach((it, i) => first.has(it.id) || first.set(it.id, i));
  const unique = items.filter((it, i) => first.get(it.id) === i);
  // A lone claim keeps claimForSmtp's own statement: answering a single claim
  // with the batch statement measured 2.5× slower (bench send-claims, one
  // commit per claim: 711 against 1,764 claims/s).
  if (unique.length === 1) {
    const only = unique[0]!;
    const claim = await claimForSmtp(db, { id: only.id, team_id: teamId }, accountId, cap, only.slotDay);
    return items.map((it, i) => (first.get(it.id) === i ? claim : undefined));
  }
  const input = JSON.stringify(unique.map((it, ord) => ({ ord, id: it.id, slot_day: it.slotDay })));
  const { rows } = await sql<{ id: string; attempts: number }>`${sql.raw(PREPARED)}
    WITH today AS (SELECT (now() AT TIME ZONE 'UTC')::date AS day),
    input AS (SELECT * FROM ${recordset(input, unique.length, 'x (ord int, id uuid, slot_day date)')} AS x),
    eligible AS (
      SELECT i.ord, i.id, i.slot_day IS NOT DISTINCT FROM (SELECT day FROM today) AS reserved
        FROM input i JOIN email_send_log l ON l.id = i.id AND l.status IN ('queued', 'deferred')
    ),
    need AS (SELECT count(*)::int AS n FROM eligible WHERE NOT reserved),
    bump AS (
      INSERT INTO mail_account_usage AS u (mail_account_id, day, team_id, claimed, last_grant)
      SELECT ${accountId}::uuid, today.day, ${teamId}::uuid, least(need.n, ${cap}::int), least(need.n, ${cap}::int)
        FROM need, today WHERE need.n > 0 AND ${cap}::int >= 1
      ON CONFLICT (mail_account_id, day) DO UPDATE
        SET claimed = u.claimed + least(excluded.claimed, greatest(0, ${cap}::int - u.claimed)),
            last_grant = least(excluded.claimed, greatest(0, ${cap}::int - u.claimed))
        WHERE u.claimed < ${cap}::int -- a full day's row is not written at all
      RETURNING last_grant
    ),
    chosen AS (
      SELECT id FROM eligible WHERE reserved
      UNION ALL
      SELECT q.id FROM (SELECT id, row_number() OVER (ORDER BY ord) AS k FROM eligible WHERE NOT reserved) q
       WHERE q.k <= coalesce((SELECT last_grant FROM bump), 0)
    )
    UPDATE email_send_log SET status = 'sending', attempts = attempts + 1, claimed_at = now(), updated_at = now()
     WHERE id IN (SELECT id FROM chosen) AND status IN ('queued', 'deferred')
    RETURNING id, attempts`.execute(db);
  const byId = new Map(rows.map((r) => [r.id, { attempts: r.attempts }]));
  return items.map((it, i) => (first.get(it.id) === i ? byId.get(it.id) : undefined));
}

// A broadcast's or automation's message keeps their priority when it waits (campaigns/broadcast.ts, automation.ts).
const BROADCAST_AWARE = sql`CASE WHEN EXISTS (
    SELECT 1 FROM email_send_log l JOIN campaign_sends s ON s.id = l.campaign_send_id
     WHERE l.id = x.id AND s.campaign_type IN ('broadcast', 'automation')) THEN ${JOB_PRIORITY.broadcast}::int ELSE x.priority END`;

/**
 * Messages over their account's daily limit get a send_email job at the next
 * UTC midnight (one per message: the job key keeps a re-run from adding a
 * second). Until then they stay `queued`, visible in the message log.
 */
export async function wakeNextDay(db: Db, rows: { id: string; source: Source }[]): Promise<void> {
  if (rows.length === 0) return;
  // Not addJobs: the run time (the database's next UTC midnight) and the job key
  // are computed per row in SQL. The payload is send_email's one shape.
  const sendEmail: JobName = 'send_email';
  await sql`
    SELECT graphile_worker.add_job(${sendEmail}, json_build_object('email_send_log_ids', json_build_array(x.id)),
             run_at := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day',
             max_attempts := 10, priority := ${BROADCAST_AWARE}, job_key := 'send-next-day:' || x.id, job_key_mode := 'preserve_run_at')
      FROM jsonb_to_recordset(${JSON.stringify(rows.map((r) => ({ id: r.id, priority: sendPriority(r.source) })))}::jsonb)
           AS x (id uuid, priority int)`.execute(db);
}

/**
 * Takes one of the account's messages-per-minute slots (`max_per_minute`) in
 * the current minute; false when the minute's slots are used up. One row per
 * account, reset when the minute changes, so the table does not grow. A slot
 * taken for a claim that then does not happen is not given back (it errs on
 * sending less).
 */
export async function takeMinuteSlot(db: Db, accountId: string, perMinute: number): Promise<boolean> {
  const { rows } = await sql<{ one: number }>`
    INSERT INTO mail_account_minute_usage AS r (mail_account_id, minute, claimed)
    VALUES (${accountId}::uuid, date_trunc('minute', now()), 1)
    ON CONFLICT (mail_account_id) DO UPDATE
      SET claimed = CASE WHEN r.minute = excluded.minute THEN r.claimed + 1 ELSE 1 END, minute = excluded.minute
      WHERE r.minute <> excluded.minute OR r.claimed < ${perMinute}::int
    RETURNING 1 AS one`.execute(db);
  return rows.length > 0;
}

/** Messages held back by an account's per-minute limit get a send_email job at the next minute (one per message). */
export async function wakeNextMinute(db: Db, rows: { id: string; source: Source }[]): Promise<void> {
  if (rows.length === 0) return;
  const sendEmail: JobName = 'send_email';
  await sql`
    SELECT graphile_worker.add_job(${sendEmail}, json_build_object('email_send_log_ids', json_build_array(x.id)),
             run_at := date_trunc('minute', now()) + interval '1 minute',
             max_attempts := 10, priority := ${BROADCAST_AWARE}, job_key := 'send-next-minute:' || x.id, job_key_mode := 'preserve_run_at')
      FROM jsonb_to_recordset(${JSON.stringify(rows.map((r) => ({ id: r.id, priority: sendPriority(r.source) })))}::jsonb)
           AS x (id uuid, priority int)`.execute(db);
}
