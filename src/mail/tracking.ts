// Recording opens, clicks and honeypot hits: one transaction per hit that locks
// the send's log row, reads the previous hits of that send, takes the bot
// decision (bots.ts), and writes the hit, the engagement counters (people only)
// and the webhook event together.
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { emit, type EventName } from '../events/emit.ts';
import { classifyHit, HONEYPOT_SAME_IP_SECONDS, HONEYPOT_WINDOW_SECONDS, RAPID_CLICK_WINDOW_MS, type BotDecision, type HitKind } from './bots.ts';

type Tx = Transaction<Database>;

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
  /** The transaction's clock: every time written for this hit. */
  now: Date;
};

/**
 * The send's row, locked for the rest of the transaction so that concurrent hits
 * of one message (a scanner fetching every link at once) are scored one after
 * the other, each seeing the ones before.
 */
export async function lockSend(tx: Tx, sendLogId: string): Promise<LockedSend | undefined> {
  const { rows } = await sql<LockedSend>`
    SELECT l.id, l.team_id, l.contact_id, l.email, l.open_tracking, l.click_tracking,
           extract(epoch FROM now() - l.sent_at)::float8 AS seconds_since_sent,
           c.country_code, now() AS now
    FROM email_send_log l
    LEFT JOIN contacts c ON c.id = l.contact_id AND c.team_id = l.team_id
    WHERE l.id = ${sendLogId}::uuid
    FOR UPDATE OF l`.execute(tx);
  return rows[0];
}

/** Signals that come from the send's earlier hits. */
export async function previousHitSignals(
  tx: Tx,
  sendLogId: string,
  ip: string | null,
  url: string | null,
): Promise<{ honeypotFollowed: boolean; otherLinksClickedRecently: number }> {
  const { rows } = await sql<{ honeypot: boolean; other_links: number }>`
    SELECT
      coalesce(bool_or(kind = 'honeypot' AND (created_at > now() - make_interval(secs => ${HONEYPOT_WINDOW_SECONDS}::float8)
                                              OR (ip = ${ip}::text AND created_at > now() - make_interval(secs => ${HONEYPOT_SAME_IP_SECONDS}::float8)))),
               false) AS honeypot,
      count(DISTINCT url) FILTER (WHERE kind = 'click'
                                    AND created_at > now() - make_interval(secs => ${RAPID_CLICK_WINDOW_MS / 1000}::float8)
                                    AND url IS DISTINCT FROM ${url}::text)::int AS other_links
    FROM tracking_hits
    WHERE email_send_log_id = ${sendLogId}::uuid AND kind IN ('honeypot', 'click')`.execute(tx);
  return { honeypotFollowed: rows[0]?.honeypot ?? false, otherLinksClickedRecently: rows[0]?.other_links ?? 0 };
}

export type HitInput = {
  kind: HitKind;
  sendLogId: string;
  method: string;
  ip: string | null;
  userAgent: string | null;
  /** The signed click target; null for opens and the honeypot. */
  url: string | null;
};

export type HitResult =
  | { status: 'unknown_send' }
  | { status: 'not_tracked' }
  | { status: 'recorded'; decision: BotDecision; event: EventName | null };

function isTracked(send: LockedSend, kind: HitKind): boolean {
  if (kind === 'open') return send.open_tracking;
  if (kind === 'click') return send.click_tracking;
  return true; // honeypot hits are evidence about the message, kept whatever the settings
}

function eventName(kind: HitKind, isBot: boolean): EventName {
  if (kind === 'open') return isBot ? 'email.bot.opened' : 'email.opened';
  return isBot || kind === 'honeypot' ? 'email.bot.clicked' : 'email.clicked';
}

// Only a person's opens and clicks count. contacts.updated_at is left alone: it
// is the record's edit time, not its activity time.
async function countEngagement(tx: Tx, send: LockedSend, kind: 'open' | 'click'): Promise<void> {
  const at = send.now;
  if (kind === 'open') {
    await sql`UPDATE email_send_log SET opens_count = opens_count + 1,
                first_opened_at = coalesce(first_opened_at, ${at}), updated_at = now()
              WHERE id = ${send.id}::uuid`.execute(tx);
    if (send.contact_id) {
      await sql`UPDATE contacts SET opens_count = opens_count + 1,
                  first_opened_at = coalesce(first_opened_at, ${at}),
                  last_opened_at = greatest(last_opened_at, ${at})
                WHERE id = ${send.contact_id}::uuid AND team_id = ${send.team_id}::uuid`.execute(tx);
    }
  } else {
    await sql`UPDATE email_send_log SET clicks_count = clicks_count + 1,
                first_clicked_at = coalesce(first_clicked_at, ${at}), updated_at = now()
              WHERE id = ${send.id}::uuid`.execute(tx);
    if (send.contact_id) {
      await sql`UPDATE contacts SET clicks_count = clicks_count + 1,
                  first_clicked_at = coalesce(first_clicked_at, ${at}),
                  last_clicked_at = greatest(last_clicked_at, ${at})
                WHERE id = ${send.contact_id}::uuid AND team_id = ${send.team_id}::uuid`.execute(tx);
    }
  }
}

/** The interface.md 6.3 payload; bot events add `decision` (decisions.md §7). */
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

async function recordHitTx(tx: Tx, hit: HitInput): Promise<HitResult> {
  const send = await lockSend(tx, hit.sendLogId);
  if (!send) return { status: 'unknown_send' };
  if (!isTracked(send, hit.kind)) return { status: 'not_tracked' };

  const previous = await previousHitSignals(tx, send.id, hit.ip, hit.url);
  const { decision, fingerprint } = classifyHit({
    kind: hit.kind,
    method: hit.method,
    userAgent: hit.userAgent,
    ip: hit.ip,
    // A hit before sent_at is written can only be a machine on the delivery path.
    secondsSinceSent: send.seconds_since_sent === null ? 0 : Math.max(0, send.seconds_since_sent),
    ...previous,
  });

  // A honeypot hit on a message without click tracking is kept as evidence
  // (it marks later hits) but is not reported: the team asked for no clicks.
  const report = hit.kind !== 'honeypot' || send.click_tracking;
  let eventId: string | null = null;
  let event: EventName | null = null;
  if (report) {
    event = eventName(hit.kind, decision.is_bot);
    const isBotEvent = event.startsWith('email.bot.');
    if (!isBotEvent) await countEngagement(tx, send, hit.kind === 'open' ? 'open' : 'click');
    [eventId = null] = await emit(tx, [
      { teamId: send.team_id, name: event, contactId: send.contact_id, payload: payloadOf(send, hit, decision, isBotEvent), occurredAt: send.now },
    ]);
  }

  await tx
    .insertInto('tracking_hits')
    .values({
      team_id: send.team_id,
      email_send_log_id: send.id,
      contact_id: send.contact_id,
      kind: hit.kind,
      method: hit.method,
      url: hit.url,
      ip: hit.ip,
      user_agent: hit.userAgent,
      is_bot: decision.is_bot,
      bot_score: decision.bot_score,
      reasons: decision.reasons,
      fingerprint,
      event_id: eventId,
      created_at: send.now,
    })
    .execute();
  return { status: 'recorded', decision, event };
}

// Deadlock (40P01) or serialization (40001) failures with a concurrent writer
// of the same send or contact are retried; the hit is idempotent until commit.
const RETRYABLE = new Set(['40P01', '40001']);

export async function recordHit(db: Db, hit: HitInput): Promise<HitResult> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute((tx) => recordHitTx(tx, hit));
    } catch (err) {
      if (attempt >= 3 || !RETRYABLE.has((err as { code?: string }).code ?? '')) throw err;
    }
  }
}

/** The send an unsubscribe link points at, with its team's name for the page. */
export async function findSendForUnsubscribe(db: Db | Tx, sendLogId: string) {
  const { rows } = await sql<{ id: string; team_id: string; email: string; team_name: string; contact_status: string | null }>`
    SELECT l.id, l.team_id, l.email, t.name AS team_name, c.status AS contact_status
    FROM email_send_log l
    JOIN teams t ON t.id = l.team_id
    LEFT JOIN contacts c ON c.team_id = l.team_id AND c.email = l.email
    WHERE l.id = ${sendLogId}::uuid`.execute(db);
  return rows[0];
}
