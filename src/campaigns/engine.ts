// The campaign engine: trigger events become one recorded decision per
// (event, campaign): send, or skip with a reason. A batch of events is decided
// in one transaction with a fixed number of statements (not one per event).
//
// Race-freedom: before reading any history, the transaction takes an advisory
// lock per (campaign, contact) and row locks on the campaign's mail accounts,
// each in one global order (no deadlock between two deciders). READ COMMITTED
// gives every later statement a fresh snapshot, so the history read after the
// lock includes every decision committed by the previous holder: two events for
// one contact at once cannot both pass a daily cap of 1, and two sends cannot
// both take an account's last slot of the day.
import { createHash } from 'node:crypto';
import { sql, type Transaction } from 'kysely';
import { PREPARED, type Db } from '../db/pool.ts';
import { idsRecordset, recordset } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';
import type { SkipReason } from '../db/schema-engine.ts';
import { TRIGGER_EVENT_NAMES, TRIGGER_NAMES_SQL } from '../events/triggers.ts';
import { dailyCap, SEND_BATCH, SEND_PRIORITY } from '../mail/send.ts';
import { addJobs } from '../lib/jobs.ts';
import type { SendDataValue } from './schemas.ts';
import { matchesSegment } from './segment.ts';
import { suppressionsInForce, type SuppressionReason } from '../contacts/suppressions.ts';

export type Clock = () => Date;
type Tx = Transaction<Database>;

export type Candidate = {
  event_id: string;
  team_id: string;
  contact_id: string;
  campaign_id: string;
  campaign_send_id: string;
  send_status: string;
  send_data: SendDataValue;
};

export type Decision = {
  id: string;
  event_id: string;
  campaign_id: string;
  campaign_send_id: string;
  contact_id: string;
  decision: 'send' | 'skip';
  reason: SkipReason | null;
  email_send_log_id: string | null;
  template_id: string | null;
  mail_account_id: string | null;
  decided_at: Date;
};

const DAY_MS = 86_400_000;

/** The skip reason of an address on the suppression list (a contact status's name where one mirrors it). */
const SUPPRESSED_SKIP: Record<SuppressionReason, SkipReason> = {
  unsubscribed: 'unsubscribed', bounced_hard: 'bounced', complained: 'complained',
  soft_bounce: 'suppressed', manual: 'suppressed', erased: 'suppressed',
};

/**
 * The (event, campaign) pairs to decide for trigger events: every campaign of
 * the event's team whose latest send is active or paused (paused is recorded
 * as a skip, so the decisions list says why nothing was sent), whose
 * event_triggered_send is enabled and whose triggers include the event.
 */
export async function loadEventCandidates(trx: Tx | Db, eventIds: string[]): Promise<Candidate[]> {
  const ids = [...new Set(eventIds)];
  if (ids.length === 0) return [];
  // Prepared, with the batch as a sized recordset (src/db/recordset.ts): as an
  // unnamed statement keyed by `= ANY` of an array it was planned at every
  // call, 340 µs per batch of about four events in the latency run of
  // `npm run bench -- campaigns`, more than it took to run.
  const { rows } = await sql<Candidate>`${sql.raw(PREPARED)}
    SELECT e.id AS event_id, e.team_id, e.contact_id, c.id AS campaign_id,
           s.id AS campaign_send_id, s.status AS send_status, s.send_data
      FROM ${idsRecordset(ids)} AS x
      JOIN events e ON e.id = x.id
      JOIN campaigns c ON c.team_id = e.team_id AND e.name = ANY (c.trigger_events) AND c.deleted_at IS NULL
                      AND cardinality(c.trigger_events) > 0 -- campaigns_trigger_idx: a team's broadcasts are not read
     CROSS JOIN LATERAL (
       SELECT s.id, s.status, s.send_data FROM campaign_sends s
        WHERE s.campaign_id = c.id AND s.team_id = c.team_id
        ORDER BY s.created_at DESC, s.id DESC LIMIT 1
     ) s
     WHERE e.contact_id IS NOT NULL
       AND e.name = ANY (${[...TRIGGER_EVENT_NAMES]}::text[])
       AND s.status IN ('active', 'paused')
       AND coalesce((s.send_data -> 'event_triggered_send' ->> 'enabled')::boolean, true)
     ORDER BY e.occurred_at, e.id, c.id`.execute(trx);
  return rows;
}

/** A signed 64-bit advisory-lock key for (campaign, contact). */
function lockKey(campaignId: string, contactId: string): bigint {
  return createHash('sha256').update(`plover:decide:${campaignId}:${contactId}`).digest().readBigInt64BE(0);
}

type ContactRow = Record<string, unknown> & { id: string; team_id: string; email: string; status: string };
type AccountRow = { id: string; team_id: string; status: string; daily_limit: number; campaign_share_percent: number };
type History = { last_at: Date | null; today: number };

/** Picks the first usable id from the cursor on, round-robin; returns the id and the advanced cursor. */
function rotate(ids: string[], cursor: number, usable: (id: string) => boolean): { id: string; next: number } | null {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[(cursor + i) % ids.length];
    if (usable(id)) return { id, next: cursor + i + 1 };
  }
  return null;
}

/**
 * Decides every candidate in the caller's transaction: records the decisions,
 * and for each send an email_send_log row (queued) and its send_email job, so
 * a decision and its e-mail commit or roll back together. Pairs already
 * decided (a retried job) are left out. `appSecret` lets the suppression list
 * match erased addresses (kept as their keyed hash); without it only
 * addresses in clear match here, and the send task still checks both.
 */
export async function decide(trx: Tx, all: Candidate[], now: Date, appSecret?: string): Promise<Decision[]> {
  if (all.length === 0) return [];
  const pairs = [...new Map(all.map((c) => [`${c.campaign_id}:${c.contact_id}`, c])).values()];
  const keys = [...new Set(pairs.map((c) => lockKey(c.campaign_id, c.contact_id)))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  await sql`SELECT count(pg_advisory_xact_lock(k)) FROM unnest(${keys.map(String)}::bigint[]) AS k`.execute(trx);

  const accountIds = [...new Set(all.flatMap((c) => c.send_data.mail_account_ids ?? []))].sort();
  const templateIds = [...new Set(all.flatMap((c) => c.send_data.template_ids ?? []))];
  const contactIds = [...new Set(all.map((c) => c.contact_id))];
  const dayStart = new Date(Math.floor(now.getTime() / DAY_MS) * DAY_MS);
  const dayEnd = new Date(dayStart.getTime() + DAY_MS);

  // The account locks come after the contact locks and in id order everywhere.
  const accounts = await sql<AccountRow>`
    SELECT id, team_id, status, daily_limit, campaign_share_percent FROM mail_accounts
     WHERE id = ANY (${accountIds}::uuid[]) ORDER BY id FOR UPDATE`.execute(trx);
  const [decided, accountCounts, templates, contacts, history, cursors] = await Promise.all([
    sql<{ event_id: string; campaign_id: string }>`
      SELECT event_id, campaign_id FROM campaign_decisions
       WHERE event_id = ANY (${[...new Set(all.map((c) => c.event_id))]}::uuid[])`.execute(trx),
    // What the account's daily limit counts (claims for SMTP in the database's
    // UTC day, as the claims write them: mail/daily-usage.ts), plus its
    // messages still waiting to be claimed that will take slots ahead of
    // anything decided now: event-triggered ones (decided earlier) and
    // transactional ones (their jobs run first). Waiting broadcast and
    // automation messages are left out: event-triggered jobs claim ahead of
    // them, and at the limit they wait for the next day. The waiting ones are
    // counted up to the cap and no further (the decision only asks whether the
    // sum is below it), through an index of waiting messages keyed by account
    // and by this condition (email_send_log_account_pending_idx, the same
    // expression): the day's sent mail and a broadcast's backlog are never
    // read, however much of them there is.
    // Prepared, and the two batch reads below too, their batches as sized
    // recordsets: unnamed (or keyed by arrays) they were planned at every
    // decision batch, 47 and 42 µs per event in `bench campaigns`' latency run
    // against 14 and 9 executing.
    sql<{ mail_account_id: string; n: number }>`${sql.raw(PREPARED)}
      SELECT a.id AS mail_account_id,
             coalesce((SELECT u.claimed FROM mail_account_usage u
                        WHERE u.mail_account_id = a.id AND u.day = (now() AT TIME ZONE 'UTC')::date), 0)
             + (SELECT count(*) FROM (
                  SELECT 1 FROM email_send_log l
                   WHERE l.mail_account_id = a.id AND l.status IN ('queued', 'deferred')
                     AND (l.event_id IS NOT NULL OR l.source = 'transactional') = true
                   LIMIT a.cap) s) AS n
        FROM ${recordset(JSON.stringify(accounts.rows.map((a) => ({ id: a.id, cap: dailyCap(a, 'campaign') }))), accounts.rows.length, 'a (id uuid, cap int)')} AS a`.execute(trx),
    sql<{ id: string; team_id: string }>`
      SELECT id, team_id FROM templates WHERE id = ANY (${templateIds}::uuid[]) AND status = 'active'`.execute(trx),
    sql<ContactRow>`SELECT * FROM contacts WHERE id = ANY (${contactIds}::uuid[])`.execute(trx),
    sql<{ campaign_id: string; contact_id: string; last_at: Date; today: number }>`${sql.raw(PREPARED)}
      SELECT d.campaign_id, d.contact_id, max(d.decided_at) AS last_at,
             count(*) FILTER (WHERE d.decided_at >= ${dayStart} AND d.decided_at < ${dayEnd}) AS today
        FROM campaign_decisions d
        JOIN ${recordset(JSON.stringify(pairs.map((p) => ({ campaign_id: p.campaign_id, contact_id: p.contact_id }))), pairs.length, 'p (campaign_id uuid, contact_id uuid)')} AS p
          ON d.campaign_id = p.campaign_id AND d.contact_id = p.contact_id
       WHERE d.decision = 'send'
       GROUP BY d.campaign_id, d.contact_id`.execute(trx),
    sql<{ campaign_send_id: string; template_cursor: number; account_cursor: number }>`
      SELECT campaign_send_id, template_cursor, account_cursor FROM campaign_rotation
       WHERE campaign_send_id = ANY (${[...new Set(all.map((c) => c.campaign_send_id))]}::uuid[])`.execute(trx),
  ]);

  // Every reason on the list stops campaign mail, whatever the contact's status says.
  const suppressed = await suppressionsInForce(trx, contacts.rows.map((c) => ({ team_id: c.team_id, email: c.email })), appSecret);

  const done = new Set(decided.rows.map((r) => `${r.event_id}:${r.campaign_id}`));
  const accountById = new Map(accounts.rows.map((a) => [a.id, a]));
  const sentToday = new Map(accountCounts.rows.map((r) => [r.mail_account_id, Number(r.n)]));
  const templateTeam = new Map(templates.rows.map((t) => [t.id, t.team_id]));
  const contactById = new Map(contacts.rows.map((c) => [c.id, c]));
  const hist = new Map<string, History>(
    history.rows.map((h) => [`${h.campaign_id}:${h.contact_id}`, { last_at: h.last_at, today: Number(h.today) }]),
  );
  const rotation = new Map(cursors.rows.map((r) => [r.campaign_send_id, { template: Number(r.template_cursor), account: Number(r.account_cursor) }]));
  // Cursors moved by this batch, with their team (for the upsert).
  const moved = new Map<string, string>();

  type Pending = Omit<Decision, 'id' | 'email_send_log_id'> & { team_id: string; email: string; open: boolean; click: boolean };
  const pending: Pending[] = [];
  for (const c of all) {
    if (done.has(`${c.event_id}:${c.campaign_id}`)) continue;
    done.add(`${c.event_id}:${c.campaign_id}`);
    const contact = contactById.get(c.contact_id);
    if (!contact || contact.team_id !== c.team_id) continue; // deleted since the event: nobody to decide for
    const sd = c.send_data;
    const ets = sd.event_triggered_send;
    const key = `${c.campaign_id}:${c.contact_id}`;
    const h = hist.get(key) ?? { last_at: null, today: 0 };
    let rot = rotation.get(c.campaign_send_id);
    if (!rot) rotation.set(c.campaign_send_id, (rot = { template: 0, account: 0 }));

    let reason: SkipReason | null = null;
    let template: { id: string; next: number } | null = null;
    let account: { id: string; next: number } | null = null;
    if (c.send_status !== 'active') reason = 'paused';
    else if (contact.status === 'unsubscribed' || contact.status === 'bounced' || contact.status === 'complained') reason = contact.status;
    else if (suppressed.has(`${contact.team_id}|${contact.email}`)) reason = SUPPRESSED_SKIP[suppressed.get(`${contact.team_id}|${contact.email}`)!];
    else if (!matchesSegment(contact, sd.segment_query?.rules ?? [])) reason = 'segment_mismatch';
    else if (h.last_at && now.getTime() - h.last_at.getTime() < (ets?.contact_cooldown_interval ?? 0) * 1000) reason = 'cooldown';
    else if (h.today >= (ets?.contact_daily_email_cap ?? Infinity)) reason = 'daily_cap';
    else {
      const ids = sd.mail_account_ids ?? [];
      const active = ids.filter((id) => accountById.get(id)?.team_id === c.team_id && accountById.get(id)?.status === 'active');
      // Campaign mail stops at its share of the limit (mail/send.ts dailyCap): the rest is kept for transactional mail.
      account = rotate(ids, rot.account, (id) => active.includes(id) && (sentToday.get(id) ?? 0) < dailyCap(accountById.get(id)!, 'campaign'));
      if (active.length === 0) reason = 'no_mail_account';
      else if (!account) reason = 'account_daily_limit';
      else {
        template = rotate(sd.template_ids ?? [], rot.template, (id) => templateTeam.get(id) === c.team_id);
        if (!template) reason = 'no_template';
      }
    }
    const send = reason === null;
    if (send) {
      rot.account = account!.next;
      rot.template = template!.next;
      moved.set(c.campaign_send_id, c.team_id);
      sentToday.set(account!.id, (sentToday.get(account!.id) ?? 0) + 1);
      hist.set(key, { last_at: now, today: h.today + 1 });
    }
    pending.push({
      event_id: c.event_id,
      campaign_id: c.campaign_id,
      campaign_send_id: c.campaign_send_id,
      contact_id: c.contact_id,
      team_id: c.team_id,
      email: contact.email,
      decision: send ? 'send' : 'skip',
      reason,
      template_id: send ? template!.id : null,
      mail_account_id: send ? account!.id : null,
      open: sd.open_tracking !== false,
      click: sd.click_tracking !== false,
      decided_at: now,
    });
  }
  if (pending.length === 0) return [];

  const sends = pending.filter((p) => p.decision === 'send');
  const logIds = new Map<string, string>();
  if (sends.length > 0) {
    // Prepared, as the decisions' insert below: planning each cost more than
    // half its execution per batch in `bench campaigns`' latency run (24 and 21
    // µs per event); a generic plan is the custom one for an INSERT … SELECT.
    const { rows } = await sql<{ id: string; event_id: string; campaign_id: string }>`${sql.raw(PREPARED)}
      INSERT INTO email_send_log (team_id, campaign_id, campaign_send_id, contact_id, event_id, template_id,
                                  mail_account_id, email, status, open_tracking, click_tracking, queued_at, created_at, updated_at)
      SELECT x.team_id, x.campaign_id, x.campaign_send_id, x.contact_id, x.event_id, x.template_id,
             x.mail_account_id, x.email, 'queued', x.open, x.click, ${now}, ${now}, now()
        FROM jsonb_to_recordset(${JSON.stringify(sends)}::jsonb) AS x (
          team_id uuid, campaign_id uuid, campaign_send_id uuid, contact_id uuid, event_id uuid, template_id uuid,
          mail_account_id uuid, email text, open boolean, click boolean)
      RETURNING id, event_id, campaign_id`.execute(trx);
    for (const r of rows) logIds.set(`${r.event_id}:${r.campaign_id}`, r.id);
    // One send_email job per SEND_BATCH sends: a batch is claimed, sent and recorded together (mail/send.ts).
    const jobs = [];
    for (let i = 0; i < rows.length; i += SEND_BATCH) {
      jobs.push({ payload: { email_send_log_ids: rows.slice(i, i + SEND_BATCH).map((r) => r.id) }, priority: SEND_PRIORITY });
    }
    await addJobs(trx, 'send_email', jobs);
  }
  const decisionRows = pending.map((p) => ({ ...p, email_send_log_id: logIds.get(`${p.event_id}:${p.campaign_id}`) ?? null }));
  const { rows: ids } = await sql<{ id: string; event_id: string; campaign_id: string }>`${sql.raw(PREPARED)}
    INSERT INTO campaign_decisions (team_id, event_id, campaign_id, campaign_send_id, contact_id, decision, reason, email_send_log_id, decided_at)
    SELECT x.team_id, x.event_id, x.campaign_id, x.campaign_send_id, x.contact_id, x.decision, x.reason, x.email_send_log_id, ${now}
      FROM jsonb_to_recordset(${JSON.stringify(decisionRows)}::jsonb) AS x (
        team_id uuid, event_id uuid, campaign_id uuid, campaign_send_id uuid, contact_id uuid, decision text, reason text, email_send_log_id uuid)
    RETURNING id, event_id, campaign_id`.execute(trx);
  const idOf = new Map(ids.map((r) => [`${r.event_id}:${r.campaign_id}`, r.id]));

  if (moved.size > 0) {
    const sendIds = [...moved.keys()];
    await sql`
      INSERT INTO campaign_rotation (campaign_send_id, team_id, template_cursor, account_cursor)
      SELECT * FROM unnest(${sendIds}::uuid[], ${sendIds.map((id) => moved.get(id)!)}::uuid[],
                           ${sendIds.map((id) => rotation.get(id)!.template)}::bigint[], ${sendIds.map((id) => rotation.get(id)!.account)}::bigint[])
      ON CONFLICT (campaign_send_id) DO UPDATE
        SET template_cursor = EXCLUDED.template_cursor, account_cursor = EXCLUDED.account_cursor`.execute(trx);
  }
  return decisionRows.map((d) => ({
    id: idOf.get(`${d.event_id}:${d.campaign_id}`)!,
    event_id: d.event_id,
    campaign_id: d.campaign_id,
    campaign_send_id: d.campaign_send_id,
    contact_id: d.contact_id,
    decision: d.decision,
    reason: d.reason,
    email_send_log_id: d.email_send_log_id,
    template_id: d.template_id,
    mail_account_id: d.mail_account_id,
    decided_at: d.decided_at,
  }));
}

// Up to this many waiting events of a team are decided in one transaction.
// bench/campaigns.ts: 20,000 single-event jobs (POST /email/events at full
// speed) each locked the team's mail account for its own short transaction:
// ~30 e-mails/s, 150 ms of lock wait per e-mail. Taken together, a batch pays
// for the lock, the history reads and the inserts once.
const DECIDE_BATCH = 500;

/**
 * Teams with trigger events waiting for decisions, in team id order after
 * `after` (null: from the first), at most `limit`: the decider loop's work list
 * (decider.ts). A loose scan of events_undecided_idx (one index descent per team
 * found, however many events each has waiting), so an idle poll costs one
 * descent into an empty index. Events held by another transaction count.
 *
 * Ordered by all of the index's keys, not by team_id alone: with statistics
 * taken while a burst of events was undecided (an ANALYZE before the loop
 * caught up) the planner took most events for undecided, and walked another
 * index that starts with team_id (the idempotency key's) filtering each row,
 * which reads every event of the teams after `after`. Only the partial index
 * gives this order without a sort (test/db/batch-plans.test.ts).
 */
export async function waitingTeams(db: Db, after: string | null, limit: number): Promise<string[]> {
  const { rows } = await sql<{ team_id: string }>`${sql.raw(PREPARED)}
    WITH RECURSIVE t(team_id) AS (
      (SELECT team_id FROM events
        WHERE team_id > ${after ?? '00000000-0000-0000-0000-000000000000'}::uuid
          AND decided_at IS NULL AND contact_id IS NOT NULL AND name IN ${TRIGGER_NAMES_SQL}
        ORDER BY team_id, occurred_at, id LIMIT 1)
      UNION ALL
      SELECT (SELECT e.team_id FROM events e
               WHERE e.team_id > t.team_id
                 AND e.decided_at IS NULL AND e.contact_id IS NOT NULL AND e.name IN ${TRIGGER_NAMES_SQL}
               ORDER BY e.team_id, e.occurred_at, e.id LIMIT 1)
        FROM t WHERE t.team_id IS NOT NULL
    )
    SELECT team_id FROM t WHERE team_id IS NOT NULL LIMIT ${limit}::int`.execute(db);
  return rows.map((r) => r.team_id);
}

export type DecideOpts = {
  /**
   * The rest of the processing of the events a batch decides (tasks.ts: the
   * webhook fan-out), in its transaction: they have no process_events job.
   */
  processTaken: (trx: Tx, eventIds: string[]) => Promise<void>;
  /** Matches erased addresses on the suppression list (see decide). */
  appSecret?: string;
  /** The batch's transaction gives up waiting for a lock, and any statement of it, after these (an error: the caller retries later). */
  lockTimeoutMs?: number;
  statementTimeoutMs?: number;
};

/** The advisory lock key a team's deciders take (pg_try_advisory_xact_lock). */
export function decideLockKey(teamId: string): bigint {
  return createHash('sha256').update(`plover:decide-team:${teamId}`).digest().readBigInt64BE(0);
}

/**
 * One batch of a team's waiting trigger events, decided in one transaction
 * under the team's advisory lock: 'busy' when another decider holds it, 'none'
 * when no waiting event could be taken (none, or all held by other
 * transactions), 'decided' otherwise. The batch's events get the rest of their
 * processing (`processTaken`) in the same transaction and are marked decided
 * and processed. The caller is the decider loop (decider.ts).
 */
export async function decideBatch(db: Db, teamId: string, clock: Clock, opts: DecideOpts): Promise<'busy' | 'none' | 'decided'> {
  const key = decideLockKey(teamId);
  return db.transaction().execute(async (trx) => {
    // Timeouts for this transaction only (set_config's third argument; none
    // given: the session's), in the lock's round trip.
    const ms = (v: number | undefined) => (v === undefined ? null : `${Math.ceil(v)}ms`);
    const { rows: lock } = await sql<{ ok: boolean }>`${sql.raw(PREPARED)}
      SELECT pg_try_advisory_xact_lock(${String(key)}::bigint) AS ok,
             set_config('lock_timeout', coalesce(${ms(opts.lockTimeoutMs)}::text, current_setting('lock_timeout')), true) AS lock_timeout,
             set_config('statement_timeout', coalesce(${ms(opts.statementTimeoutMs)}::text, current_setting('statement_timeout')), true) AS statement_timeout`.execute(trx);
    if (!lock[0]!.ok) return 'busy' as const;
    // The name list is spelled out (TRIGGER_NAMES_SQL): the partial index events_undecided_idx matches it.
    // Locked now, and rows another statement holds (a process_events job of an
    // earlier version marking its events processed) are skipped, not waited
    // for: two multi-row updates of events in different orders would deadlock;
    // a later pass of the loop takes them. FOR NO KEY UPDATE, the lock the
    // update below takes anyway: FOR UPDATE would also block the foreign-key
    // checks (FOR KEY SHARE) of rows that reference these events (a delivery
    // or a message being inserted for one).
    // Prepared, its limit a literal: planned once per connection (unnamed, it
    // was planned at every batch, 124 µs a call in `bench campaigns`' latency
    // run); the generic plan walks the same partial index by team.
    const { rows } = await sql<{ id: string }>`${sql.raw(PREPARED)}
      SELECT id FROM events
       WHERE team_id = ${teamId} AND decided_at IS NULL AND contact_id IS NOT NULL
         AND name IN ${TRIGGER_NAMES_SQL}
       ORDER BY occurred_at, id
       LIMIT ${sql.lit(DECIDE_BATCH)}
       FOR NO KEY UPDATE SKIP LOCKED`.execute(trx);
    if (rows.length === 0) return 'none' as const;
    const batch = rows.map((r) => r.id);
    await decide(trx, await loadEventCandidates(trx, batch), clock(), opts.appSecret);
    await opts.processTaken(trx, batch);
    // Marked decided and processed in one update: each update of an event row
    // rewrites its eight index entries (decided_at is in a partial index's
    // predicate), so one update rather than two. coalesce: a process_events job
    // written by an earlier version may have marked one processed already.
    // Prepared, the batch a sized recordset (planned at every batch before: 17 µs per event in the latency run).
    await sql`${sql.raw(PREPARED)}
      UPDATE events SET decided_at = now(), processed_at = coalesce(processed_at, now())
       WHERE id IN (SELECT x.id FROM ${idsRecordset(batch)} AS x)`.execute(trx);
    return 'decided' as const;
  });
}
