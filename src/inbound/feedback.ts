// The one place where mail that comes back reaches the message log. Every
// source (the inbound SMTP listener, IMAP polling, provider webhooks) turns
// what it heard into normalised Feedback items and hands them here;
// applyFeedback matches each to its message, records it once, moves the
// message's status, the contact's status and counters, the suppression list,
// and emits the webhook events, all in one transaction with a fixed number of
// statements however many items there are.
//
// Matching: by our send-log id (a signed return-path or reply address carries
// it), by our Message-ID header (`<send-log id>@domain`, so it names the row
// directly), or by the id the relay returned in its 250 answer
// (provider_message_id). When the source knows the team (a team's webhook
// URL, a team's IMAP mailbox), the match is limited to that team: another
// team's message is simply not found.
//
// An item that matches nothing is counted (metric and log) and dropped, never
// thrown: a source that retries on error would otherwise loop on it.
//
// The same report twice (a DSN resent after a lost 250, a provider's retry)
// is recorded once: message_feedback is unique on (message, dedup key) and
// only newly inserted items have effects.
import { sql, type Transaction } from 'kysely';
import { Counter, register } from 'prom-client';
import type { Db } from '../db/pool.ts';
import { recordset } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';
import { emit, type EventName, type NewEvent } from '../events/emit.ts';
import { overSoftBounceLimit, suppress } from '../contacts/suppressions.ts';
import { retryOnConflict } from '../lib/db-retry.ts';
import { DEFAULT_INBOUND } from '../config-inbound.ts';
import { addMessageFacts, type MessageFact } from '../stats/deltas.ts';
import { UUID_RE } from '../lib/uuid.ts';
import { bareMessageId, logIdFromMessageId, REPLY_TEXT_MAX, type Feedback, type FeedbackKind } from './feedback-input.ts';

export { bareMessageId, logIdFromMessageId, REPLY_TEXT_MAX, type Feedback, type FeedbackKind, type ReplyInfo } from './feedback-input.ts';

type Tx = Transaction<Database>;

export type FeedbackOptions = {
  /** Soft bounces of one address within softBounceDays that suppress it (reason `soft_bounce`). */
  softBounceLimit?: number;
  softBounceDays?: number;
  /** Logs unmatched items (pino-like). */
  log?: { info(obj: object, msg: string): void };
};

export type FeedbackOutcome = 'applied' | 'duplicate' | 'unmatched';

export type FeedbackResult = {
  applied: number;
  duplicates: number;
  unmatched: number;
  /** Per input item, in order. */
  outcomes: FeedbackOutcome[];
};

const DIAGNOSTIC_MAX = 1000;
const KINDS: FeedbackKind[] = ['bounce_hard', 'bounce_soft', 'complaint', 'reply', 'delivered'];

function counter(name: string, help: string, labelNames: string[]): Counter {
  return (register.getSingleMetric(name) as Counter | undefined) ?? new Counter({ name, help, labelNames });
}
/** Feedback items that matched no message of ours (by source and kind). */
export const unmatchedFeedback = counter('plover_inbound_feedback_unmatched_total', 'Feedback items that matched no message', ['source', 'kind']);
/** Feedback items applied to a message (by source and kind). */
export const appliedFeedback = counter('plover_inbound_feedback_applied_total', 'Feedback items applied to a message', ['source', 'kind']);

const cut = (s: string | null | undefined, n: number) => (s == null ? null : s.length > n ? s.slice(0, n) : s);
const iso = (d: Date) => d.toISOString();

type Normalised = {
  i: number;
  team_id: string | null;
  log_id: string | null;
  smtp_message_id: string | null;
  provider_message_id: string | null;
  kind: FeedbackKind;
  at: string;
  dedup_key: string;
  source: string;
};

function normalise(f: Feedback, i: number, now: Date): Normalised | null {
  if (!KINDS.includes(f.kind)) return null;
  const smtp = bareMessageId(f.smtp_message_id);
  const given = f.message_id && UUID_RE.test(f.message_id) ? f.message_id.toLowerCase() : null;
  const logId = given ?? logIdFromMessageId(smtp);
  const provider = cut(f.provider_message_id?.trim() || null, 500);
  if (!logId && !provider) return null;
  let at = now;
  if (f.at) {
    const d = f.at instanceof Date ? f.at : new Date(f.at);
    // A report from the future (a wrong clock) or before our time is taken as now.
    if (!Number.isNaN(d.getTime()) && d.getTime() <= now.getTime() + 60_000 && d.getTime() > 0) at = d;
  }
  // A reply is one per reply message; everything else once per kind and message.
  const replyId = f.kind === 'reply' ? bareMessageId(f.reply?.message_id) : null;
  const dedup = f.kind === 'reply' ? `reply:${replyId ?? `${iso(at)}|${cut(f.reply?.subject ?? '', 200)}`}` : f.kind;
  return {
    i, team_id: f.team_id && UUID_RE.test(f.team_id) ? f.team_id : null, log_id: logId,
    // Compared only when it also named the row (a forged id would not match the stored header).
    smtp_message_id: given ? null : smtp,
    provider_message_id: provider, kind: f.kind, at: iso(at), dedup_key: cut(dedup, 1000)!,
    source: cut(f.source ?? 'smtp', 40)!,
  };
}

type Matched = {
  i: number;
  id: string;
  team_id: string;
  contact_id: string | null;
  email: string;
  message_id: string | null;
  status: string;
  campaign_send_id: string | null;
  created_at: Date;
};

/**
 * Applies feedback to the message log (see the head of this file). Never
 * throws for an item that matches nothing, or for a malformed item; throws
 * only when the database does (the caller may retry the whole call: it is
 * idempotent).
 */
export async function applyFeedback(db: Db, items: Feedback[], opts: FeedbackOptions = {}): Promise<FeedbackResult> {
  const outcomes: FeedbackOutcome[] = items.map(() => 'unmatched');
  if (items.length > 0) {
    const result = await retryOnConflict(() => db.transaction().execute((tx) => applyTx(tx, items, opts)));
    for (const [i, o] of result) outcomes[i] = o;
  }
  let applied = 0;
  let duplicates = 0;
  let unmatched = 0;
  outcomes.forEach((o, i) => {
    const f = items[i]!;
    const labels = { source: String(f.source ?? 'smtp').slice(0, 40), kind: KINDS.includes(f.kind) ? f.kind : 'unknown' };
    if (o === 'applied') {
      applied++;
      appliedFeedback.inc(labels);
    } else if (o === 'duplicate') duplicates++;
    else {
      unmatched++;
      unmatchedFeedback.inc(labels);
      opts.log?.info(
        { ...labels, message_id: f.message_id ?? null, smtp_message_id: f.smtp_message_id ?? null, provider_message_id: f.provider_message_id ?? null },
        'feedback matched no message; dropped',
      );
    }
  });
  return { applied, duplicates, unmatched, outcomes };
}

async function applyTx(tx: Tx, items: Feedback[], opts: FeedbackOptions): Promise<Map<number, FeedbackOutcome>> {
  const out = new Map<number, FeedbackOutcome>();
  const { rows: nowRows } = await sql<{ now: Date }>`SELECT now() AS now`.execute(tx);
  const now = nowRows[0]!.now;
  const norm = items.map((f, i) => normalise(f, i, now)).filter((n): n is Normalised => n !== null);
  if (norm.length === 0) return out;

  // 1. Match: by id (checked against the stored Message-ID when that is what named it), else by the relay's id.
  const { rows: matched } = await sql<Matched>`
    SELECT x.i, m.id, m.team_id, m.contact_id, m.email, m.message_id, m.status, m.campaign_send_id, m.created_at
      FROM jsonb_to_recordset(${JSON.stringify(norm)}::jsonb)
        AS x (i int, team_id uuid, log_id uuid, smtp_message_id text, provider_message_id text)
      JOIN LATERAL (
        (SELECT l.id, l.team_id, l.contact_id, l.email, l.message_id, l.status, l.campaign_send_id, greatest(l.created_at, l.sent_at) AS created_at
           FROM email_send_log l
          WHERE x.log_id IS NOT NULL AND l.id = x.log_id
            AND (x.team_id IS NULL OR l.team_id = x.team_id)
            AND (x.smtp_message_id IS NULL OR lower(l.message_id) = x.smtp_message_id))
        UNION ALL
        (SELECT l.id, l.team_id, l.contact_id, l.email, l.message_id, l.status, l.campaign_send_id, greatest(l.created_at, l.sent_at) AS created_at
           FROM email_send_log l
          WHERE x.provider_message_id IS NOT NULL AND l.provider_message_id = x.provider_message_id
            AND (x.team_id IS NULL OR l.team_id = x.team_id)
          ORDER BY l.created_at DESC LIMIT 1)
        LIMIT 1
      ) m ON true`.execute(tx);
  if (matched.length === 0) return out;

  // Log rows locked first, in id order (the order send-record.ts takes them in).
  const logIds = [...new Set(matched.map((m) => m.id))].sort();
  await sql`SELECT 1 FROM email_send_log WHERE id = ANY (${logIds}::uuid[]) ORDER BY id FOR NO KEY UPDATE`.execute(tx);

  // 2. Record each once; only newly recorded items have effects.
  const byI = new Map(norm.map((n) => [n.i, n]));
  const rows = matched.map((m) => {
    const n = byI.get(m.i)!;
    const f = items[m.i]!;
    return {
      i: m.i, team_id: m.team_id, email_send_log_id: m.id, contact_id: m.contact_id, email: m.email, kind: n.kind,
      dedup_key: n.dedup_key, source: n.source, status_code: cut(f.status_code ?? null, 40),
      diagnostic: cut(f.diagnostic ?? null, DIAGNOSTIC_MAX), feedback_type: cut(f.feedback_type ?? null, 100),
      // A report dated before its message was sent (a wrong clock) is taken as of the send.
      detail: detailOf(f), raw_ref: cut(f.raw_ref ?? null, 500),
      occurred_at: n.at < iso(new Date(m.created_at)) ? iso(new Date(m.created_at)) : n.at,
    };
  });
  const { rows: inserted } = await sql<{ email_send_log_id: string; dedup_key: string }>`
    INSERT INTO message_feedback (team_id, email_send_log_id, contact_id, email, kind, dedup_key, source, status_code,
                                  diagnostic, feedback_type, detail, raw_ref, occurred_at)
    SELECT x.team_id, x.email_send_log_id, x.contact_id, x.email, x.kind, x.dedup_key, x.source, x.status_code,
           x.diagnostic, x.feedback_type, x.detail, x.raw_ref, x.occurred_at
      FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x (
        team_id uuid, email_send_log_id uuid, contact_id uuid, email text, kind text, dedup_key text, source text,
        status_code text, diagnostic text, feedback_type text, detail jsonb, raw_ref text, occurred_at timestamptz)
     ORDER BY x.email_send_log_id, x.dedup_key
    ON CONFLICT (email_send_log_id, dedup_key) DO NOTHING
    RETURNING email_send_log_id, dedup_key`.execute(tx);
  const fresh = new Set(inserted.map((r) => `${r.email_send_log_id}|${r.dedup_key}`));
  const effective: (typeof rows)[number][] = [];
  for (const r of rows) {
    const key = `${r.email_send_log_id}|${r.dedup_key}`;
    // The first item of a key in this call takes the effect; a repeat within the call is a duplicate too.
    if (fresh.delete(key)) {
      effective.push(r);
      out.set(r.i, 'applied');
    } else out.set(r.i, 'duplicate');
  }
  if (effective.length === 0) return out;
  const matchedById = new Map(matched.map((m) => [m.i, m]));

  // 3. The message's status: per message the strongest of its new items.
  const RANK: Partial<Record<FeedbackKind, number>> = { delivered: 1, bounce_soft: 2, bounce_hard: 3 };
  const perMessage = new Map<string, (typeof effective)[number]>();
  for (const r of effective) {
    const rank = RANK[r.kind];
    if (!rank) continue;
    const prev = perMessage.get(r.email_send_log_id);
    if (!prev || rank > RANK[prev.kind]!) perMessage.set(r.email_send_log_id, r);
  }
  if (perMessage.size > 0) {
    const list = [...perMessage.values()].map((r) => ({
      id: r.email_send_log_id, kind: r.kind, at: r.occurred_at, error: r.diagnostic ?? r.status_code ?? null,
    }));
    // A bounce overrides sent, delivered and deferred (the relay accepted, then gave up), never a hard bounce;
    // a delivery report moves only `sent`.
    // The rows are locked (step 1), so `o` reads the status this UPDATE replaces.
    const { rows: moved } = await sql<{ id: string; old: string; kind: FeedbackKind; at: Date }>`
      UPDATE email_send_log l
         SET status = CASE x.kind WHEN 'bounce_hard' THEN 'bounced_hard' WHEN 'bounce_soft' THEN 'bounced_soft' ELSE 'delivered' END,
             bounced_at = CASE WHEN x.kind LIKE 'bounce%' THEN x.at ELSE l.bounced_at END,
             delivered_at = CASE WHEN x.kind = 'delivered' THEN x.at ELSE l.delivered_at END,
             last_error = CASE WHEN x.kind LIKE 'bounce%' THEN coalesce(x.error, l.last_error) ELSE l.last_error END,
             updated_at = now()
        FROM ${recordset(JSON.stringify(list), list.length, 'x (id uuid, kind text, at timestamptz, error text)')} AS x,
             (SELECT id, status FROM email_send_log WHERE id = ANY (${list.map((r) => r.id)}::uuid[])) o
       WHERE l.id = x.id AND o.id = l.id
         AND CASE x.kind
               WHEN 'bounce_hard' THEN l.status IN ('sending', 'sent', 'delivered', 'deferred', 'bounced_soft')
               WHEN 'bounce_soft' THEN l.status IN ('sending', 'sent', 'delivered', 'deferred')
               ELSE l.status = 'sent' END
      RETURNING l.id, o.status AS old, x.kind, x.at`.execute(tx);
    // Statistics: each message in at most one bounce key (a soft bounce that
    // becomes hard moves to bounced_hard at the hard bounce's time); a deferred
    // message that bounces by report was handed to the relay, so it counts as
    // sent too (one still `sending` is counted when its result is recorded).
    const facts: MessageFact[] = [];
    for (const m of moved) {
      if (m.kind === 'delivered') facts.push({ messageId: m.id, key: 'delivered', at: m.at });
      else {
        facts.push({ messageId: m.id, key: m.kind === 'bounce_hard' ? 'bounced_hard' : 'bounced_soft', at: m.at });
        if (m.old === 'bounced_soft') facts.push({ messageId: m.id, key: 'bounced_soft', at: m.at, by: -1 });
        if (m.old === 'deferred') facts.push({ messageId: m.id, key: 'sent', at: m.at });
      }
    }
    await addMessageFacts(tx, facts);
  }

  // Complaints (one per message: their dedup key is the kind) and the first
  // reply to a message count in the statistics at the report's time.
  const replied = [...new Set(effective.filter((r) => r.kind === 'reply').map((r) => r.email_send_log_id))];
  const earlierReplies = new Set<string>();
  if (replied.length > 0) {
    const { rows: counts } = await sql<{ id: string; n: number }>`
      SELECT email_send_log_id AS id, count(*)::int AS n FROM message_feedback
       WHERE email_send_log_id = ANY (${replied}::uuid[]) AND kind = 'reply' GROUP BY 1`.execute(tx);
    for (const c of counts) {
      if (c.n > effective.filter((r) => r.kind === 'reply' && r.email_send_log_id === c.id).length) earlierReplies.add(c.id);
    }
  }
  const firstReply = new Map<string, string>();
  for (const r of effective) {
    if (r.kind !== 'reply' || earlierReplies.has(r.email_send_log_id)) continue;
    const prev = firstReply.get(r.email_send_log_id);
    if (!prev || r.occurred_at < prev) firstReply.set(r.email_send_log_id, r.occurred_at);
  }
  await addMessageFacts(tx, [
    ...effective.filter((r) => r.kind === 'complaint').map((r) => ({ messageId: r.email_send_log_id, key: 'complained' as const, at: r.occurred_at })),
    ...[...firstReply].map(([messageId, at]) => ({ messageId, key: 'replied' as const, at })),
  ]);

  // 4. Contacts: counters and status (locked in id order, as send-record.ts does).
  const contacts = new Map<string, { id: string; team_id: string; soft: number; hard: number; complained: boolean; at: string }>();
  for (const r of effective) {
    if (!r.contact_id || !['bounce_hard', 'bounce_soft', 'complaint'].includes(r.kind)) continue;
    const c = contacts.get(r.contact_id) ?? { id: r.contact_id, team_id: r.team_id, soft: 0, hard: 0, complained: false, at: r.occurred_at };
    if (r.kind === 'bounce_hard') c.hard++;
    if (r.kind === 'bounce_soft') c.soft++;
    if (r.kind === 'complaint') c.complained = true;
    if (r.occurred_at > c.at) c.at = r.occurred_at;
    contacts.set(r.contact_id, c);
  }

  // Soft bounces: N within M days (this call's included) suppress the address for marketing.
  const limit = opts.softBounceLimit ?? DEFAULT_INBOUND.softBounceLimit;
  const days = opts.softBounceDays ?? DEFAULT_INBOUND.softBounceDays;
  const softAddrs = [...new Map(effective.filter((r) => r.kind === 'bounce_soft').map((r) => [`${r.team_id}|${r.email}`, r])).values()];
  const softSuppressed = await overSoftBounceLimit(tx, softAddrs, limit, days);
  const softSet = new Set(softSuppressed.map((s) => `${s.team_id}|${s.email}`));

  if (contacts.size > 0) {
    const list = [...contacts.values()]
      .map((c) => ({ ...c, soft_limit: effective.some((r) => r.contact_id === c.id && softSet.has(`${r.team_id}|${r.email}`)) }))
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    await sql`SELECT 1 FROM contacts WHERE id = ANY (${list.map((c) => c.id)}::uuid[]) ORDER BY id FOR NO KEY UPDATE`.execute(tx);
    // Status mirrors the suppression list: a complaint is the strongest; a hard
    // bounce or repeated soft bounces make an active contact `bounced`.
    await sql`
      UPDATE contacts c SET
             soft_bounces_count = c.soft_bounces_count + x.soft,
             hard_bounces_count = c.hard_bounces_count + x.hard,
             first_bounced_at = CASE WHEN x.soft + x.hard > 0 THEN coalesce(c.first_bounced_at, x.at) ELSE c.first_bounced_at END,
             last_bounced_at = CASE WHEN x.soft + x.hard > 0 THEN greatest(c.last_bounced_at, x.at) ELSE c.last_bounced_at END,
             status = CASE WHEN x.complained THEN 'complained'
                           WHEN (x.hard > 0 OR x.soft_limit) AND c.status = 'active' THEN 'bounced'
                           ELSE c.status END,
             updated_at = now()
        FROM ${recordset(JSON.stringify(list), list.length, 'x (id uuid, team_id uuid, soft int, hard int, complained boolean, soft_limit boolean, at timestamptz)')} AS x
       WHERE c.id = x.id AND c.team_id = x.team_id`.execute(tx);
  }

  // 5. Suppressions (suppress keeps the strongest reason per address).
  await suppress(tx, [
    ...effective.filter((r) => r.kind === 'bounce_hard').map((r) => ({ team_id: r.team_id, email: r.email, reason: 'bounced_hard' as const, message_id: r.email_send_log_id })),
    ...effective.filter((r) => r.kind === 'complaint').map((r) => ({ team_id: r.team_id, email: r.email, reason: 'complained' as const, message_id: r.email_send_log_id })),
    ...softAddrs.filter((r) => softSet.has(`${r.team_id}|${r.email}`))
      .map((r) => ({ team_id: r.team_id, email: r.email, reason: 'soft_bounce' as const, message_id: r.email_send_log_id })),
  ]);

  // 6. Campaign progress counts a bounce by report as it counts one at SMTP time.
  const sends = new Map<string, number>();
  for (const r of effective) {
    const m = matchedById.get(r.i)!;
    if (m.campaign_send_id && (r.kind === 'bounce_hard' || r.kind === 'bounce_soft')) sends.set(m.campaign_send_id, (sends.get(m.campaign_send_id) ?? 0) + 1);
  }
  if (sends.size > 0) {
    const list = [...sends].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, n]) => ({ id, n }));
    await sql`
      WITH locked AS (SELECT id FROM campaign_sends WHERE id = ANY (${list.map((s) => s.id)}::uuid[]) ORDER BY id FOR NO KEY UPDATE)
      UPDATE campaign_sends s SET updated_at = now(), send_progress = s.send_progress || jsonb_build_object(
               'total_bounced', coalesce((s.send_progress ->> 'total_bounced')::bigint, 0) + x.n)
        FROM jsonb_to_recordset(${JSON.stringify(list)}::jsonb) AS x (id uuid, n int)
       WHERE s.id = x.id AND s.id IN (SELECT id FROM locked)`.execute(tx);
  }

  // 7. Webhook events.
  const events: NewEvent[] = [];
  for (const r of effective) {
    const m = matchedById.get(r.i)!;
    const e = webhookEvent(items[r.i]!, r, m);
    if (e) events.push({ teamId: r.team_id, name: e.name, contactId: r.contact_id, payload: e.payload, occurredAt: r.occurred_at });
  }
  await emit(tx, events);
  return out;
}

function detailOf(f: Feedback): Record<string, unknown> | null {
  const d: Record<string, unknown> = {};
  if (f.recipient) d.recipient = cut(f.recipient, 320);
  if (f.reply) {
    d.reply = {
      from: cut(f.reply.from, 500), subject: cut(f.reply.subject, 1000), text: cut(f.reply.text, REPLY_TEXT_MAX),
      message_id: cut(f.reply.message_id ?? null, 1000), in_reply_to: cut(f.reply.in_reply_to ?? null, 1000),
      headers: f.reply.headers ?? {},
    };
  }
  return Object.keys(d).length > 0 ? d : null;
}

/** What the bounce's status code says, in the words of the webhook's bounce_category. */
export function bounceCategory(kind: 'bounce_hard' | 'bounce_soft', status: string | null | undefined): string {
  const m = /^([245])\.(\d{1,3})\.(\d{1,3})$/.exec(status ?? '');
  if (!m) return kind === 'bounce_hard' ? 'rejected' : 'deferred_too_long';
  const [subject, detail] = [m[2], m[3]];
  if (subject === '1') return 'invalid_recipient';
  if (subject === '2') return detail === '2' ? 'mailbox_full' : 'mailbox_unavailable';
  if (subject === '4' && detail === '7') return 'deferred_too_long';
  if (subject === '7') return 'policy';
  if (subject === '6') return 'content';
  return kind === 'bounce_hard' ? 'rejected' : 'deferred_too_long';
}

function bounceReason(diagnostic: string | null): string | null {
  if (!diagnostic) return null;
  // `smtp; 550 5.1.1 <x@y>: Recipient address rejected: User unknown` → the words after the codes.
  return diagnostic.replace(/^[a-z-]+;\s*/i, '').replace(/^\d{3}[ -]?(\d\.\d{1,3}\.\d{1,3}\s*)?/, '').trim().slice(0, 500) || diagnostic;
}

function webhookEvent(
  f: Feedback,
  r: { kind: FeedbackKind; occurred_at: string; diagnostic: string | null; status_code: string | null; feedback_type: string | null },
  m: Matched,
): { name: EventName; payload: Record<string, unknown> } | null {
  const base = { email_send_log_id: m.id, contact_id: m.contact_id, email: m.email };
  const at = new Date(r.occurred_at).toISOString();
  switch (r.kind) {
    case 'bounce_hard':
    case 'bounce_soft':
      return {
        name: r.kind === 'bounce_hard' ? 'email.bounced.hard' : 'email.bounced.soft',
        payload: {
          ...base, bounced_at: at, bounce_reason: bounceReason(r.diagnostic) ?? r.status_code,
          bounce_category: bounceCategory(r.kind, r.status_code), message_id: m.message_id,
          diagnostic: r.diagnostic ?? (r.status_code ? `status ${r.status_code}` : null),
          ...(r.status_code ? { status_code: r.status_code } : {}),
        },
      };
    case 'complaint':
      return { name: 'email.complained', payload: { ...base, complained_at: at, feedback_type: r.feedback_type ?? 'abuse', message_id: m.message_id } };
    case 'delivered':
      return { name: 'email.delivered', payload: { ...base, delivered_at: at, message_id: m.message_id } };
    case 'reply': {
      const reply = f.reply;
      return {
        name: 'email.replied',
        payload: {
          ...base, replied_at: at, message_id: bareMessageId(reply?.message_id) ?? null,
          in_reply_to: bareMessageId(reply?.in_reply_to) ?? m.message_id,
          headers: reply?.headers ?? { from: reply?.from ?? '', subject: reply?.subject ?? '' },
          subject: reply?.subject ?? '', content: cut(reply?.text ?? '', REPLY_TEXT_MAX),
        },
      };
    }
  }
}
