// Recording the SMTP results of one send_email batch: the log rows, the
// contacts' counters, retry jobs and the webhook events in one transaction,
// then the campaign sends' progress and the campaigns' last send in a second,
// short one (recordResults says why), each with a fixed number of statements
// however many results there are.
//
// Per-message transactions made the campaign send's progress row (and the
// campaign row) hot: every send of a campaign updated the same rows and held
// their locks until commit, so concurrent sends queued behind each other
// (15 ms of lock wait per e-mail in bench/campaigns.ts). Aggregated per batch,
// each hot row is written once per batch.
//
// Locks are taken in one order everywhere: log rows (claimed by this job
// alone), then contacts, campaign sends and campaigns, each sorted by id, so
// two batches that share a contact or a campaign wait, never deadlock. They are
// FOR NO KEY UPDATE, the lock an UPDATE of non-key columns takes anyway: FOR
// UPDATE would also block the foreign-key checks of the decider's inserts
// (email_send_log, campaign_decisions reference these rows), which held
// decisions back ~400 ms per batch in bench/campaigns.ts at 200 events/s.
import { sql, type Transaction } from 'kysely';
import type { Config } from '../config.ts';
import { PREPARED, type Db } from '../db/pool.ts';
import { recordset } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';
import { emit, type EventName, type NewEvent } from '../events/emit.ts';
import { addJobs, JOB_PRIORITY } from '../lib/jobs.ts';
import { retryOnConflict } from '../lib/db-retry.ts';
import { jitteredDelay } from '../lib/jitter.ts';
import { overSoftBounceLimit, suppress } from '../contacts/suppressions.ts';
import { providerMessageId } from '../inbound/provider-id.ts';
import { addMessageFacts, type MessageFact } from '../stats/deltas.ts';

type Tx = Transaction<Database>;

/**
 * graphile-worker priority of send_email jobs (lower runs first; default 0):
 * e-mails already decided go out before other jobs, so a backlog of
 * process_events jobs (webhook fan-out) does not hold decided sends back
 * (bench/campaigns.ts, latency at a steady 200 events/s).
 */
export const SEND_PRIORITY = JOB_PRIORITY.eventTriggered;
/** Transactional sends run before campaign sends: a campaign never holds a password reset back. */
export const TRANSACTIONAL_SEND_PRIORITY = JOB_PRIORITY.transactional;

export const sendPriority = (source: string | undefined): number =>
  source === 'transactional' ? TRANSACTIONAL_SEND_PRIORITY : SEND_PRIORITY;

export type SentRow = {
  id: string;
  team_id: string;
  campaign_id: string | null;
  campaign_send_id: string | null;
  contact_id: string | null;
  email: string;
  attempts: number;
  source?: 'campaign' | 'transactional';
};

export type Outcome =
  | { kind: 'sent'; response: string }
  | { kind: 'temporary' | 'hard' | 'failed'; response: string };

export type SendResult = { row: SentRow; outcome: Outcome; messageId: string; subject: string; accountId: string };

type Kind = 'sent' | 'temporary' | 'soft' | 'hard' | 'failed';
const STATUS: Record<Kind, string> = { sent: 'sent', temporary: 'deferred', soft: 'bounced_soft', hard: 'bounced_hard', failed: 'failed' };

const iso = (d: Date) => d.toISOString();
const json = (v: unknown) => JSON.stringify(v);

// A deadlock or serialization failure with a writer outside this module (an
// unsubscribe, a tracking hit) is retried (retryOnConflict): the messages are
// already sent, and a lost result would leave their rows in `sending` until the
// lease fails them.

/**
 * Records every result of a batch in one transaction, then adds the batch to
 * the campaign's counters in a second, short one (none when no message of the
 * batch belongs to a campaign: transactional mail). The counter rows are shared
 * by every batch of a campaign; held through a durable commit (an fsync) their
 * locks queued the batches behind each other (p99 3 s at 200 events/s in
 * bench/campaigns.ts). The second transaction commits without waiting for the
 * fsync (synchronous_commit off), so it holds the locks for microseconds. The
 * price: a crash in the instant after it can lose one batch's additions to
 * `send_progress` and `last_sent_at` (display counters); the log rows, contact
 * counters and webhook events are in the first, durable transaction.
 */
export async function recordResults(db: Db, config: Config, results: SendResult[]): Promise<void> {
  if (results.length === 0) return;
  const hot = await retryOnConflict(() => db.transaction().execute((tx) => recordTx(tx, config, results)));
  // Nothing to add (transactional mail, or no message reached SMTP): no second transaction.
  if (hot.sends.size === 0 && hot.campaigns.size === 0) return;
  await retryOnConflict(() =>
    db.transaction().execute(async (tx) => {
      await sql`SET LOCAL synchronous_commit = off`.execute(tx);
      await addToCampaignCounters(tx, hot);
    }),
  );
}

function count<K>(map: Map<K, number[]>, key: K, i: number, by = 1): void {
  const v = map.get(key) ?? [0, 0, 0];
  v[i] += by;
  map.set(key, v);
}

/** Sorted by id (the lock order), keys `id|team_id` split. */
function split(m: Map<string, number[]>) {
  return [...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, [sent, soft, hard]]) => {
    const [id, team_id] = k.split('|');
    return { id: id!, team_id: team_id!, sent: sent!, soft: soft!, hard: hard! };
  });
}

async function recordTx(tx: Tx, config: Config, results: SendResult[]): Promise<CampaignCounters> {
  const { rows } = await sql<{ at: Date }>`SELECT now() AS at`.execute(tx);
  const at = rows[0].at;
  const retries = config.sendRetryDelays;
  const items = results.map((r) => {
    const kind = (r.outcome.kind === 'temporary' && r.row.attempts > retries.length ? 'soft' : r.outcome.kind) as Kind;
    // A deferral's retry: its job and the row's retry_at are due at the same moment.
    const retryAt = kind === 'temporary'
      ? new Date(at.getTime() + jitteredDelay(retries[r.row.attempts - 1] ?? 0, config.retryJitter) * 1000)
      : null;
    return { ...r, kind, retryAt };
  });

  await sql`${sql.raw(PREPARED)}
    UPDATE email_send_log l
       -- A bounce report can arrive before this result is recorded (a relay that bounces at once): it stands.
       SET status = CASE WHEN x.status = 'sent' AND l.status IN ('bounced_hard', 'bounced_soft', 'delivered') THEN l.status ELSE x.status END,
           message_id = x.message_id, subject = x.subject, smtp_response = x.response,
           provider_message_id = coalesce(x.provider_message_id, l.provider_message_id),
           updated_at = ${at}, retry_at = x.retry_at,
           last_error = CASE WHEN x.status = 'sent' AND l.status IN ('bounced_hard', 'bounced_soft') THEN l.last_error ELSE x.last_error END,
           sent_at = CASE WHEN x.status = 'sent' THEN ${at}::timestamptz END,
           bounced_at = CASE WHEN x.status IN ('bounced_soft', 'bounced_hard') THEN ${at}::timestamptz
                             WHEN l.status IN ('bounced_hard', 'bounced_soft') THEN l.bounced_at END
      FROM ${recordset(json(items.map((r) => ({
        id: r.row.id, status: STATUS[r.kind], message_id: r.messageId, subject: r.subject, response: r.outcome.response,
        last_error: r.kind === 'sent' ? null : r.outcome.response,
        // The relay's id for the message: provider events name it so (inbound/feedback.ts matches by it).
        provider_message_id: r.kind === 'sent' ? providerMessageId(r.outcome.response) : null,
        retry_at: r.retryAt?.toISOString() ?? null,
      }))), items.length, 'x (id uuid, status text, message_id text, subject text, response text, last_error text, provider_message_id text, retry_at timestamptz)')} AS x
     WHERE l.id = x.id`.execute(tx);

  // Mail statistics: a message handed to the relay counts as sent once, at its
  // final SMTP answer (accepted, or refused hard or soft), a refusal also as a
  // bounce; each deferral counts as one. A bounce report that came first
  // counted its own bounce (inbound/feedback.ts).
  const facts: MessageFact[] = [];
  for (const r of items) {
    if (r.kind === 'failed') continue;
    if (r.kind === 'temporary') facts.push({ messageId: r.row.id, key: 'deferred', at });
    else {
      facts.push({ messageId: r.row.id, key: 'sent', at });
      if (r.kind !== 'sent') facts.push({ messageId: r.row.id, key: r.kind === 'hard' ? 'bounced_hard' : 'bounced_soft', at });
    }
  }
  await addMessageFacts(tx, facts);

  // Per contact, per campaign send, per campaign: [sent, soft, hard].
  const contacts = new Map<string, number[]>();
  const sends = new Map<string, number[]>();
  const campaigns = new Map<string, number[]>();
  const idx = { sent: 0, soft: 1, hard: 2 } as Record<Kind, number | undefined>;
  for (const r of items) {
    const i = idx[r.kind];
    if (i === undefined) continue;
    if (r.row.contact_id) count(contacts, `${r.row.contact_id}|${r.row.team_id}`, i);
    if (r.row.campaign_send_id) count(sends, r.row.campaign_send_id, i);
    if (r.row.campaign_id && r.kind === 'sent') count(campaigns, `${r.row.campaign_id}|${r.row.team_id}`, i);
  }

  // A soft bounce given up at SMTP time counts toward the soft-bounce limit as
  // one reported by DSN does (N within M days suppress the address, reason
  // soft_bounce, and make an active contact `bounced`).
  const softRows = items.filter((r) => r.kind === 'soft');
  const softOver = await overSoftBounceLimit(
    tx, softRows.map((r) => ({ team_id: r.row.team_id, email: r.row.email })), config.inbound.softBounceLimit, config.inbound.softBounceDays);
  const softSet = new Set(softOver.map((s) => `${s.team_id}|${s.email}`));
  const softLimitContacts = new Set(softRows.filter((r) => r.row.contact_id && softSet.has(`${r.row.team_id}|${r.row.email}`)).map((r) => r.row.contact_id!));

  if (contacts.size > 0) {
    const list = split(contacts).map((c) => ({ ...c, soft_limit: softLimitContacts.has(c.id) }));
    const rows = recordset(json(list), list.length, 'x (id uuid, team_id uuid, sent int, soft int, hard int, soft_limit boolean)');
    await sql`${sql.raw(PREPARED)}
      SELECT 1 FROM contacts WHERE id IN (SELECT x.id FROM ${rows} AS x) ORDER BY id FOR NO KEY UPDATE`.execute(tx);
    // Sends leave updated_at alone (activity, not an edit); bounces change the record.
    await sql`${sql.raw(PREPARED)}
      UPDATE contacts c SET
             sent_count = c.sent_count + x.sent,
             first_sent_at = CASE WHEN x.sent > 0 THEN coalesce(c.first_sent_at, ${at}) ELSE c.first_sent_at END,
             last_sent_at = CASE WHEN x.sent > 0 THEN ${at} ELSE c.last_sent_at END,
             soft_bounces_count = c.soft_bounces_count + x.soft,
             hard_bounces_count = c.hard_bounces_count + x.hard,
             first_bounced_at = CASE WHEN x.soft + x.hard > 0 THEN coalesce(c.first_bounced_at, ${at}) ELSE c.first_bounced_at END,
             last_bounced_at = CASE WHEN x.soft + x.hard > 0 THEN ${at} ELSE c.last_bounced_at END,
             updated_at = CASE WHEN x.soft + x.hard > 0 THEN now() ELSE c.updated_at END,
             status = CASE WHEN (x.hard > 0 OR x.soft_limit) AND c.status = 'active' THEN 'bounced' ELSE c.status END
        FROM ${rows} AS x
       WHERE c.id = x.id AND c.team_id = x.team_id`.execute(tx);
  }
  // A hard bounce suppresses the address for the team for every kind of mail,
  // contact or not (transactional recipients need not be contacts).
  await suppress(tx, [
    ...items.filter((r) => r.kind === 'hard').map((r) => ({
      team_id: r.row.team_id, email: r.row.email, reason: 'bounced_hard' as const, message_id: r.row.id,
    })),
    ...softRows.filter((r) => softSet.has(`${r.row.team_id}|${r.row.email}`)).map((r) => ({
      team_id: r.row.team_id, email: r.row.email, reason: 'soft_bounce' as const, message_id: r.row.id,
    })),
  ]);
  const retry = items.filter((r) => r.kind === 'temporary');
  if (retry.length > 0) {
    await addJobs(tx, 'send_email', retry.map((r) => ({
      payload: { email_send_log_ids: [r.row.id] },
      runAt: r.retryAt!,
      priority: sendPriority(r.row.source),
    })));
  }

  const events: NewEvent[] = [];
  for (const r of items) {
    const e = webhookEvent(r, at);
    if (e) events.push({ teamId: r.row.team_id, name: e.name, contactId: r.row.contact_id, payload: e.payload, occurredAt: at });
  }
  await emit(tx, events);

  return { sends, campaigns, at };
}

type CampaignCounters = { sends: Map<string, number[]>; campaigns: Map<string, number[]>; at: Date };

/** The campaign sends' progress and the campaigns' last send time, added on their locked rows (no lost update). */
async function addToCampaignCounters(tx: Tx, { sends, campaigns, at }: CampaignCounters): Promise<void> {
  if (sends.size > 0) {
    const list = split(sends);
    // Added on the locked row: no lost update between two workers.
    await sql`${sql.raw(PREPARED)}
      WITH x AS (SELECT * FROM ${recordset(json(list), list.length, 'x (id uuid, sent int, soft int, hard int)')} AS x),
      locked AS (SELECT id FROM campaign_sends WHERE id IN (SELECT id FROM x) ORDER BY id FOR NO KEY UPDATE),
      cur AS (
        SELECT s.id, coalesce((s.send_progress ->> 'total_sent')::bigint, 0) + x.sent AS total_sent,
               coalesce((s.send_progress ->> 'total_bounced')::bigint, 0) + x.soft + x.hard AS total_bounced
          FROM campaign_sends s
          JOIN locked USING (id)
          JOIN x ON x.id = s.id
      )
      UPDATE campaign_sends s SET updated_at = now(), send_progress = s.send_progress || jsonb_build_object(
               'total_sent', cur.total_sent, 'total_bounced', cur.total_bounced,
               'delivery_rate', CASE WHEN cur.total_sent + cur.total_bounced = 0 THEN 0
                 ELSE round(cur.total_sent::numeric / (cur.total_sent + cur.total_bounced), 4) END)
        FROM cur WHERE s.id = cur.id`.execute(tx);
  }
  if (campaigns.size > 0) {
    const list = split(campaigns);
    await sql`${sql.raw(PREPARED)}
      WITH x AS (SELECT * FROM ${recordset(json(list), list.length, 'x (id uuid, team_id uuid)')} AS x),
      locked AS (SELECT id FROM campaigns WHERE id IN (SELECT id FROM x) ORDER BY id FOR NO KEY UPDATE)
      UPDATE campaigns c SET draft_data = jsonb_set(c.draft_data, '{last_sent_at}', to_jsonb(${iso(at)}::text))
        FROM x
       WHERE c.id = x.id AND c.team_id = x.team_id AND c.id IN (SELECT id FROM locked)`.execute(tx);
  }
}

function webhookEvent(r: SendResult & { kind: Kind }, at: Date): { name: EventName; payload: Record<string, unknown> } | null {
  const { row, outcome } = r;
  const base = { email_send_log_id: row.id, contact_id: row.contact_id, email: row.email };
  switch (r.kind) {
    case 'sent':
      return {
        name: 'email.sent',
        payload: {
          ...base, subject: r.subject, sent_at: iso(at), mail_server_id: r.accountId,
          campaign_id: row.campaign_id, campaign_send_id: row.campaign_send_id,
        },
      };
    case 'temporary':
      return { name: 'email.deferred', payload: { ...base, deferred_at: iso(at), defer_reason: outcome.response, message_id: r.messageId } };
    case 'soft':
    case 'hard':
      return {
        name: r.kind === 'hard' ? 'email.bounced.hard' : 'email.bounced.soft',
        payload: {
          ...base, bounced_at: iso(at), bounce_reason: outcome.response,
          bounce_category: r.kind === 'hard' ? 'rejected' : 'deferred_too_long',
          message_id: r.messageId, diagnostic: `smtp; ${outcome.response}`,
        },
      };
    default:
      return null;
  }
}
