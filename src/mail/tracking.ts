// Recording opens, clicks and honeypot hits.
//
// Counting is deduplicated per (message, link, verdict) per hour
// (COUNT_WINDOW_SECONDS): the first hit counts for the counters, the event and
// so the webhook delivery; later ones within the hour only raise the message's
// raw hit totals (email_send_log.open_hits_count / click_hits_count) and are
// stored as hit rows up to a cap per message. No per-IP limit on counting:
// mailbox providers fetch through shared proxies.
//
// A hit that counts takes the full path: one transaction that locks the send's
// log row, reads the previous hits of that send, takes the bot decision
// (bots.ts) and writes the counters, the event and the hit together, so that
// concurrent first hits (a scanner fetching every link at once) are scored one
// after the other. A replay of a link already counted this hour is decided
// without the lock, from one read, and written by one statement committed
// without waiting for the fsync. Replay loop of one link, 8 connections, old
// and new back to back on a shared 2-core machine (bench/tracking-replay.ts):
// opens 87 -> 354 and 192 -> 480 hits/s, clicks 97 -> 334 and 144 -> 540,
// p99 533 -> 162 and 256 -> 57 ms.
import { ERASED_ADDRESS } from '../contacts/erase.ts';
import { emailHmac } from '../contacts/suppressions.ts';
import { sql, type Transaction } from 'kysely';
import { PREPARED, type Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { emit, type EventName } from '../events/emit.ts';
import { classifyHit, HONEYPOT_SAME_IP_SECONDS, HONEYPOT_WINDOW_SECONDS, RAPID_CLICK_WINDOW_MS, type BotDecision, type HitKind } from './bots.ts';
import { retryOnConflict } from '../lib/db-retry.ts';
import { addMessageFacts } from '../stats/deltas.ts';

type Tx = Transaction<Database>;

/** Hits of one (message, link, verdict) within this many seconds of its last counted hit do not count again. */
export const COUNT_WINDOW_SECONDS = 3600;

export type TrackingLimits = {
  /** Hit rows stored per message (open, click and honeypot hits together); past it only the raw totals grow. */
  maxHitsPerMessage: number;
};

export type LockedSend = {
  id: string;
  team_id: string;
  contact_id: string | null;
  email: string;
  open_tracking: boolean;
  click_tracking: boolean;
  /** Null when the send has no sent_at yet. */
  seconds_since_sent: number | null;
  country_code: string | null;
  /** The statement's (or transaction's) clock: every time written for this hit. */
  now: Date;
};

export type HitInput = {
  kind: HitKind;
  sendLogId: string;
  method: string;
  ip: string | null;
  userAgent: string | null;
  /** The signed click target; null for opens and the honeypot. */
  url: string | null;
};

type Signals = { honeypotFollowed: boolean; otherLinksClickedRecently: number };
type Fragment = ReturnType<typeof sql>;
type HitState = { human_counted: boolean; bot_counted: boolean; honeypot: boolean; other_links: number };

// Whether this link counted within the window, for a person and for a bot,
// and the signals from the send's earlier hits: honeypot hits within the
// window (any address) or within a day (this address), and distinct other
// links clicked in the last 2 s. Each an index probe or range, so a send's
// long hit history is not scanned on every hit. A click's link is the md5 of
// its target: a URL may be longer than an index entry.
function hitStateColumns(sendId: Fragment, teamId: Fragment, hit: HitInput): Fragment {
  const counted = (isBot: boolean) => sql`EXISTS (
      SELECT 1 FROM tracking_counted d
       WHERE d.email_send_log_id = ${sendId} AND d.team_id = ${teamId} AND d.kind = ${hit.kind}::text
         AND d.link = md5(${hit.url ?? ''}::text)::uuid AND d.is_bot = ${isBot}::boolean
         AND d.counted_at > now() - make_interval(secs => ${COUNT_WINDOW_SECONDS}::float8))`;
  const otherLinks =
    hit.kind === 'click'
      ? sql`(SELECT count(DISTINCT h.url) FROM tracking_hits h
              WHERE h.email_send_log_id = ${sendId} AND h.team_id = ${teamId} AND h.kind = 'click'
                AND h.created_at > now() - make_interval(secs => ${RAPID_CLICK_WINDOW_MS / 1000}::float8)
                AND h.url IS DISTINCT FROM ${hit.url}::text)::int`
      : sql`0`;
  return sql`${counted(false)} AS human_counted, ${counted(true)} AS bot_counted,
    EXISTS (
      SELECT 1 FROM tracking_hits h
       WHERE h.email_send_log_id = ${sendId} AND h.team_id = ${teamId} AND h.kind = 'honeypot'
         AND h.created_at > now() - make_interval(secs => ${HONEYPOT_SAME_IP_SECONDS}::float8)
         AND (h.created_at > now() - make_interval(secs => ${HONEYPOT_WINDOW_SECONDS}::float8) OR h.ip = ${hit.ip}::text)
    ) AS honeypot, ${otherLinks} AS other_links`;
}

// The send and (unlocked reads only) the hit's state, in one round trip.
// Prepared (src/db/pool.ts), like the raw-hit update: every hit runs them, and
// planning them cost more than running them (bench tracking-replay
// --pg-stats: the unlocked read 645 µs of planning against 407 of execution).
function sendQuery(hit: HitInput, opts: { lock: boolean }) {
  return sql<LockedSend & Partial<HitState>>`${sql.raw(PREPARED)}
    SELECT l.id, l.team_id, l.contact_id, l.email, l.open_tracking, l.click_tracking,
           extract(epoch FROM now() - l.sent_at)::float8 AS seconds_since_sent,
           c.country_code, now() AS now
           ${opts.lock ? sql`` : sql`, ${hitStateColumns(sql`l.id`, sql`l.team_id`, hit)}`}
    FROM email_send_log l
    LEFT JOIN contacts c ON c.id = l.contact_id AND c.team_id = l.team_id
    WHERE l.id = ${hit.sendLogId}::uuid
    ${opts.lock ? sql`FOR UPDATE OF l` : sql``}`;
}

/**
 * The send's row, locked for the rest of the transaction so that concurrent
 * counting hits of one message are scored one after the other, each seeing the
 * ones before.
 */
export async function lockSend(tx: Tx, hit: HitInput): Promise<LockedSend | undefined> {
  return (await sendQuery(hit, { lock: true }).execute(tx)).rows[0];
}

/**
 * The hit's state read after the lock: a statement's snapshot is taken before
 * it waits for a lock, so only a new statement sees the hits it waited for.
 */
async function stateAfterLock(tx: Tx, send: LockedSend, hit: HitInput): Promise<HitState> {
  const { rows } = await sql<HitState>`${sql.raw(PREPARED)} SELECT ${hitStateColumns(sql`${send.id}::uuid`, sql`${send.team_id}::uuid`, hit)}`.execute(tx);
  return rows[0]!;
}

const signalsOf = (s: Partial<HitState>): Signals => ({ honeypotFollowed: s.honeypot ?? false, otherLinksClickedRecently: s.other_links ?? 0 });

export type HitResult =
  | { status: 'unknown_send' }
  | { status: 'not_tracked' }
  /** `event` is null when the hit did not count (a repeat within the hour, or an unreported honeypot hit). */
  | { status: 'recorded'; decision: BotDecision; event: EventName | null; counted: boolean };

function isTracked(send: LockedSend, kind: HitKind): boolean {
  // An erased recipient's message records nothing more (no IP, no user agent).
  if (send.email === ERASED_ADDRESS) return false;
  if (kind === 'open') return send.open_tracking;
  if (kind === 'click') return send.click_tracking;
  return true; // honeypot hits are evidence about the message, kept whatever the settings
}

function eventName(kind: HitKind, isBot: boolean): EventName {
  if (kind === 'open') return isBot ? 'email.bot.opened' : 'email.opened';
  return isBot || kind === 'honeypot' ? 'email.bot.clicked' : 'email.clicked';
}

// A honeypot hit on a message without click tracking is kept as evidence (it
// marks later hits) but is not reported: the team asked for no clicks.
const reported = (send: LockedSend, kind: HitKind) => kind !== 'honeypot' || send.click_tracking;

function classify(send: LockedSend, hit: HitInput, signals: Signals) {
  return classifyHit({
    kind: hit.kind,
    method: hit.method,
    userAgent: hit.userAgent,
    ip: hit.ip,
    // A hit before sent_at is written can only be a machine on the delivery path.
    secondsSinceSent: send.seconds_since_sent === null ? 0 : Math.max(0, send.seconds_since_sent),
    ...signals,
  });
}

/** The open or click payload (docs/api.md, "Webhook payloads"); bot events add `decision`. */
function payloadOf(send: LockedSend, hit: HitInput, decision: BotDecision, isBotEvent: boolean): Record<string, unknown> {
  const at = send.now.toISOString();
  const common = { email_send_log_id: send.id, contact_id: send.contact_id, email: send.email };
  const who = { ip_address: hit.ip, user_agent: hit.userAgent, country_code: send.country_code };
  const payload: Record<string, unknown> =
    hit.kind === 'open'
      ? { ...common, opened_at: at, ...who }
      : // short_link_id: click URLs are signed full URLs, not stored short links.
        { ...common, clicked_at: at, url: hit.url, ...who, short_link_id: null };
  if (isBotEvent) payload.decision = decision;
  return payload;
}

type Classified = ReturnType<typeof classifyHit>;

/**
 * One statement: the raw hit total (and, for a person's counted hit, the
 * message's and the contact's engagement counters) goes up, and the hit is stored while the
 * message has at most `maxHitsPerMessage` hits. The send's row lock it takes
 * is held for one statement when no transaction is open.
 *
 * `asyncCommit` (only outside a transaction: the statement is then its own)
 * commits without waiting for the WAL flush: `set_config(..., true)` lasts
 * to the end of the statement's implicit transaction, whose commit reads it.
 * One round trip instead of BEGIN, SET LOCAL, the statement and COMMIT.
 */
async function bumpAndStore(
  db: Db | Tx,
  send: LockedSend,
  hit: HitInput,
  c: Classified,
  opts: { countPerson: boolean; eventId: string | null; limits: TrackingLimits; asyncCommit?: boolean },
): Promise<void> {
  // Inside a transaction it would make the whole transaction's commit asynchronous.
  if (opts.asyncCommit && db.isTransaction) throw new Error('asyncCommit is for a statement outside a transaction');
  const isOpen = hit.kind === 'open';
  const at = send.now;
  const [hits, count, first, last] = (isOpen
    ? ['open_hits_count', 'opens_count', 'first_opened_at', 'last_opened_at']
    : ['click_hits_count', 'clicks_count', 'first_clicked_at', 'last_clicked_at']).map((column) => sql.raw(column)); // constants, not input
  const raw = sql`${hits} = ${hits} + 1`;
  const engagement = opts.countPerson ? sql`, ${count} = ${count} + 1, ${first} = coalesce(${first}, ${at}), updated_at = now()` : sql``;
  // A person's counted hit also moves the contact, in the same statement;
  // contacts.updated_at is left alone: it is the record's edit time, not its
  // activity time.
  const contact = opts.countPerson && send.contact_id
    ? sql`, k AS (
        UPDATE contacts SET ${count} = ${count} + 1, ${first} = coalesce(${first}, ${at}), ${last} = greatest(${last}, ${at})
         WHERE id = ${send.contact_id}::uuid AND team_id = ${send.team_id}::uuid)`
    : sql``;
  const d = c.decision;
  // An uncorrelated subquery in the WHERE runs once, before the row is
  // looked up: the setting is in force whatever the statement then finds.
  const asyncCommit = opts.asyncCommit ? sql` AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL` : sql``;
  await sql`${sql.raw(PREPARED)}
    WITH l AS (
      UPDATE email_send_log SET ${raw}${engagement}
       WHERE id = ${send.id}::uuid AND team_id = ${send.team_id}::uuid${asyncCommit}
      RETURNING id, team_id, open_hits_count + click_hits_count AS hits
    )${contact}
    INSERT INTO tracking_hits (team_id, email_send_log_id, contact_id, kind, method, url, ip, user_agent,
                               is_bot, bot_score, reasons, fingerprint, event_id, created_at)
    SELECT l.team_id, l.id, ${send.contact_id}::uuid, ${hit.kind}::text, ${hit.method}::text, ${hit.url}::text, ${hit.ip}::text,
           ${hit.userAgent}::text, ${d.is_bot}::boolean, ${d.bot_score}::float8, ${d.reasons}::text[], ${c.fingerprint}::text,
           ${opts.eventId}::uuid, ${send.now}::timestamptz
      FROM l WHERE l.hits <= ${opts.limits.maxHitsPerMessage}`.execute(db);
}

const alreadyCounted = (state: Partial<HitState>, c: Classified) => (c.decision.is_bot ? state.bot_counted : state.human_counted) === true;

async function countingHitTx(tx: Tx, hit: HitInput, limits: TrackingLimits): Promise<HitResult> {
  const send = await lockSend(tx, hit);
  if (!send) return { status: 'unknown_send' };
  if (!isTracked(send, hit.kind)) return { status: 'not_tracked' };
  const state = await stateAfterLock(tx, send, hit);
  const c = classify(send, hit, signalsOf(state));
  // A concurrent hit of the same link may have counted while we waited.
  if (!reported(send, hit.kind) || alreadyCounted(state, c)) {
    await bumpAndStore(tx, send, hit, c, { countPerson: false, eventId: null, limits });
    return { status: 'recorded', decision: c.decision, event: null, counted: false };
  }
  const event = eventName(hit.kind, c.decision.is_bot);
  const isBotEvent = event.startsWith('email.bot.');
  // Statistics count a message once per verdict: at its first counted open
  // (or click, the honeypot being a link) of that verdict. The send row is
  // locked, so this read sees every earlier count of the message.
  const kinds = hit.kind === 'open' ? ['open'] : ['click', 'honeypot'];
  const { rows: counted } = await sql<{ first: boolean }>`${sql.raw(PREPARED)}
    WITH first AS (
      SELECT NOT EXISTS (SELECT 1 FROM tracking_counted d
                          WHERE d.email_send_log_id = ${send.id}::uuid AND d.kind = ANY (${kinds}::text[]) AND d.is_bot = ${c.decision.is_bot}) AS first
    ), ins AS (
      INSERT INTO tracking_counted (email_send_log_id, team_id, kind, link, is_bot, counted_at)
      VALUES (${send.id}::uuid, ${send.team_id}::uuid, ${hit.kind}, md5(${hit.url ?? ''}::text)::uuid, ${c.decision.is_bot}, ${send.now})
      ON CONFLICT (email_send_log_id, kind, link, is_bot) DO UPDATE SET counted_at = EXCLUDED.counted_at
    )
    SELECT first FROM first`.execute(tx);
  if (counted[0]?.first) {
    const key = hit.kind === 'open' ? (c.decision.is_bot ? 'opened_bot' : 'opened_human') : c.decision.is_bot ? 'clicked_bot' : 'clicked_human';
    await addMessageFacts(tx, [{ messageId: send.id, key, at: send.now }]);
  }
  const [eventId = null] = await emit(tx, [
    { teamId: send.team_id, name: event, contactId: send.contact_id, payload: payloadOf(send, hit, c.decision, isBotEvent), occurredAt: send.now },
  ]);
  await bumpAndStore(tx, send, hit, c, { countPerson: !isBotEvent, eventId, limits });
  return { status: 'recorded', decision: c.decision, event, counted: true };
}

// Deadlock or serialization failures with a concurrent writer of the same send
// or contact are retried (retryOnConflict); the hit is idempotent until commit.

export async function recordHit(db: Db, hit: HitInput, limits: TrackingLimits): Promise<HitResult> {
  // Unlocked first: a repeat of a link already counted within the hour (the
  // verdict taken from committed hits) needs neither FOR UPDATE nor the
  // counting transaction. The locked path decides again from its own reads,
  // so a race between two first hits still counts once.
  const peek = (await sendQuery(hit, { lock: false }).execute(db)).rows[0];
  if (!peek) return { status: 'unknown_send' };
  if (!isTracked(peek, hit.kind)) return { status: 'not_tracked' };
  const c = classify(peek, hit, signalsOf(peek));
  if (!reported(peek, hit.kind) || alreadyCounted(peek, c)) {
    // Without waiting for the fsync: a replay loop's hits all update the one
    // message row, and a durable commit held its lock through every flush.
    // A crash can lose the last instant's raw hits; nothing that counts.
    await retryOnConflict(() => bumpAndStore(db, peek, hit, c, { countPerson: false, eventId: null, limits, asyncCommit: true }));
    return { status: 'recorded', decision: c.decision, event: null, counted: false };
  }
  return retryOnConflict(() => db.transaction().execute((tx) => countingHitTx(tx, hit, limits)));
}

/** The send an unsubscribe link points at, with its team's name for the page. */
export async function findSendForUnsubscribe(db: Db | Tx, sendLogId: string) {
  const { rows } = await sql<{ id: string; team_id: string; email: string; team_name: string; contact_status: string | null }>`
    SELECT l.id, l.team_id, l.email, t.name AS team_name, c.status AS contact_status
    FROM email_send_log l
    JOIN teams t ON t.id = l.team_id
    LEFT JOIN contacts c ON c.team_id = l.team_id AND c.email = l.email
    WHERE l.id = ${sendLogId}::uuid AND l.email <> ${ERASED_ADDRESS}`.execute(db);
  return rows[0];
}

/**
 * The recipient a recipient-signed unsubscribe link names (tracking-links.ts):
 * by contact id, or by address, within the team. Reads no send log row, so
 * the link works after retention removed the message. An address link finds
 * its team even when no contact has the address (unsubscribing it then
 * records a suppression, as the old link did).
 */
export async function findRecipientForUnsubscribe(db: Db | Tx, teamId: string, by: 'c' | 'a', value: string, secret = '') {
  type Found = { team_id: string; email: string; team_name: string; contact_status: string | null; erased: boolean };
  if (by === 'c') {
    const { rows } = await sql<Found>`
      SELECT c.team_id, c.email, t.name AS team_name, c.status AS contact_status, false AS erased
      FROM contacts c JOIN teams t ON t.id = c.team_id
      WHERE c.id = ${value}::uuid AND c.team_id = ${teamId}::uuid`.execute(db);
    return rows[0];
  }
  // An erased address (kept only as its keyed hash) is already suppressed for
  // all mail: unsubscribing it again would store it in clear.
  const { rows } = await sql<Found>`
    SELECT t.id AS team_id, ${value}::text AS email, t.name AS team_name, c.status AS contact_status,
           EXISTS (SELECT 1 FROM suppressions s WHERE s.team_id = t.id AND s.email_hmac = ${emailHmac(secret, value)}
                                                  AND s.reason = 'erased') AS erased
    FROM teams t LEFT JOIN contacts c ON c.team_id = t.id AND c.email = ${value}::text
    WHERE t.id = ${teamId}::uuid`.execute(db);
  return rows[0];
}
