// One contact's timeline: every thing that happened to it, from every table
// that records it, in time order (GET /email/contacts/{id}/timeline and the
// dashboard's contact timeline).
//
// Each source is one query on an ordered (contact_id, time, id) index
// (migration 0022), after the keyset cursor and LIMIT page size + 1; their
// UNION ALL is sorted and cut to the page. A page so reads at most
// 7 × (page size + 1) index entries, whatever the contact's history: a
// contact with 100,000 messages answers as fast as one with ten
// (test/contacts/timeline.test.ts checks the plan and the time).
//
// Order: time, then the source's rank (so things of one transaction read in
// their causal order: an event, its decision, the message it queued), then id.
import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../db/pool.ts';
import { validationFailed } from '../lib/errors.ts';

export type TimelineOrder = 'desc' | 'asc';

export type TimelineItem = { at: string; type: string; detail: Record<string, unknown> };

/** The types an item can have, as docs/decisions.md ("Contact timeline") defines them. */
export const TIMELINE_TYPES = [
  'contact_saved', 'unsubscribed', 'event', 'decision', 'message_queued', 'message_suppressed', 'message_sent',
  'message_deferred', 'message_bounced', 'message_delivered', 'message_complained', 'message_replied', 'message_failed',
  'message_cancelled', 'opened', 'clicked', 'suppressed', 'webhook',
] as const;

/** An event payload larger than this (bytes of JSON) is left out of the item, with `payload_omitted: true`. */
export const TIMELINE_PAYLOAD_MAX = 8192;

// Ranks of the sources; see the order above.
const R_EVENT = 1;
const R_DECISION = 2;
const R_MESSAGE = 3;
const R_ENDED = 5;
const R_HIT = 6;
const R_SUPPRESSION = 7;
const R_WEBHOOK = 8;

/**
 * Where a page starts: after the item with this (time, rank, id). The time is
 * PostgreSQL's own text of it, to the microsecond, which reads back exactly in
 * every year it stores: a client's occurred_at may fall in UTC year 0 (1 BC)
 * or 10000, which the ISO text of cursors made before could not carry. An ISO
 * cursor made before still reads.
 */
type Cursor = { at: string; rank: number; id: string; page: number };

/** The cursor time's format (to_char of the time in UTC); PostgreSQL reads it back exactly. */
const CURSOR_TIME_FORMAT = `'YYYY-MM-DD HH24:MI:SS.US"+00" BC'`;
const CURSOR_AT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{6}Z$/;
const CURSOR_AT_PG = /^(\d{4,6})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\.\d{6}\+00 (AD|BC)$/;

/**
 * A time PostgreSQL will read, checked here: a date it refuses would be a 500,
 * not the cursor's 422. The ISO form too (Date.parse takes 31 February and year 0000).
 */
function cursorTimeOk(v: string): boolean {
  const m = CURSOR_AT.exec(v) ?? CURSOR_AT_PG.exec(v);
  if (!m) return false;
  const [y, mo, d, h, mi, sec] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const bc = m[7] === 'BC';
  if (y < 1 || (bc && y > 4713) || (!bc && y > 294276) || h > 23 || mi > 59 || sec > 59) return false;
  const day = new Date(0);
  day.setUTCFullYear(bc ? 1 - y : y, mo - 1, d); // 1 BC is year 0
  return day.getUTCMonth() === mo - 1 && day.getUTCDate() === d;
}

const CURSOR_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function encodeCursor(c: Cursor): string {
  return Buffer.from(JSON.stringify([c.at, c.rank, c.id, c.page])).toString('base64url');
}

/** The cursor a client sent back, or 422 (it is opaque: anything not made here is refused). */
export function decodeCursor(s: string): Cursor {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(s, 'base64url').toString('utf8'));
  } catch {
    v = null;
  }
  if (
    Array.isArray(v) && v.length === 4 && typeof v[0] === 'string' && cursorTimeOk(v[0]) &&
    Number.isInteger(v[1]) && v[1] >= R_EVENT && v[1] <= R_WEBHOOK && typeof v[2] === 'string' && CURSOR_ID.test(v[2]) &&
    Number.isInteger(v[3]) && v[3] >= 1 && v[3] <= 1_000_000_000
  ) {
    return { at: v[0], rank: v[1], id: v[2], page: v[3] };
  }
  throw validationFailed([{ field: 'cursor', message: 'must be a cursor this list returned (meta.next_cursor)' }]);
}

/** The keyset condition of one source (rank `rank`, time column `at`, id column `id`) after the cursor. */
function after(c: Cursor | undefined, order: TimelineOrder, rank: number, at: RawBuilder<unknown>, id: RawBuilder<unknown>) {
  if (!c) return sql`TRUE`;
  const t = sql`${c.at}::timestamptz`;
  if (order === 'desc') {
    if (rank === c.rank) return sql`(${at}, ${id}) < (${t}, ${c.id}::uuid)`;
    return rank < c.rank ? sql`${at} <= ${t}` : sql`${at} < ${t}`;
  }
  if (rank === c.rank) return sql`(${at}, ${id}) > (${t}, ${c.id}::uuid)`;
  return rank > c.rank ? sql`${at} >= ${t}` : sql`${at} > ${t}`;
}

type Row = { at: Date; at_us: string; rank: number; id: string; type: string; detail: Record<string, unknown> };

/** The statement of one page (exported so a test can EXPLAIN the real thing). */
export function timelineQuery(
  teamId: string,
  contact: { id: string; email: string },
  opts: { perPage: number; order: TimelineOrder; cursor?: Cursor },
) {
  const { perPage, order, cursor } = opts;
  const dir = order === 'desc' ? sql`DESC` : sql`ASC`;
  const limit = perPage + 1;
  const cond = (rank: number, at: string, id: string) => after(cursor, order, rank, sql.ref(at), sql.ref(id));
  const payload = (col: string) =>
    sql`CASE WHEN octet_length(${sql.ref(col)}::text) <= ${TIMELINE_PAYLOAD_MAX} THEN ${sql.ref(col)} END`;
  const omitted = (col: string) => sql`octet_length(${sql.ref(col)}::text) > ${TIMELINE_PAYLOAD_MAX}`;
  const status = (col: string) =>
    sql`CASE ${sql.ref(col)} WHEN 'sending' THEN 'queued' WHEN 'bounced_hard' THEN 'bounced' WHEN 'bounced_soft' THEN 'bounced' ELSE ${sql.ref(col)} END`;

  return sql<Row>`
    SELECT t.at, to_char(t.at AT TIME ZONE 'UTC', ${sql.raw(CURSOR_TIME_FORMAT)}) AS at_us, t.rank, t.id, t.type, t.detail
      FROM (
        (SELECT e.occurred_at AS at, ${R_EVENT} AS rank, e.id,
                CASE e.name
                  WHEN 'contact.saved' THEN 'contact_saved'
                  WHEN 'contact.unsubscribed' THEN 'unsubscribed'
                  WHEN 'email.sent' THEN 'message_sent'
                  WHEN 'email.deferred' THEN 'message_deferred'
                  WHEN 'email.bounced.hard' THEN 'message_bounced'
                  WHEN 'email.bounced.soft' THEN 'message_bounced'
                  WHEN 'email.delivered' THEN 'message_delivered'
                  WHEN 'email.complained' THEN 'message_complained'
                  WHEN 'email.replied' THEN 'message_replied'
                  ELSE 'event' END AS type,
                CASE
                  WHEN e.name = 'contact.saved' THEN jsonb_build_object('event_id', e.id, 'fields', e.payload - 'contact_id')
                  WHEN e.name = 'contact.unsubscribed' THEN jsonb_build_object('event_id', e.id,
                    'reason', e.payload -> 'unsubscribe_reason', 'method', e.payload -> 'unsubscribe_method')
                  WHEN e.name LIKE 'email.%' THEN jsonb_build_object('event_id', e.id,
                    'email_send_log_id', e.payload -> 'email_send_log_id',
                    'bounce_type', CASE e.name WHEN 'email.bounced.hard' THEN 'hard' WHEN 'email.bounced.soft' THEN 'soft' END)
                    || CASE WHEN ${omitted('e.payload')} THEN '{"payload_omitted": true}'::jsonb
                            ELSE e.payload - 'contact_id' - 'email' - 'email_send_log_id' END
                  ELSE jsonb_build_object('event_id', e.id, 'name', e.name, 'payload', ${payload('e.payload')})
                    || CASE WHEN ${omitted('e.payload')} THEN '{"payload_omitted": true}'::jsonb ELSE '{}'::jsonb END
                END AS detail
           FROM events e
          WHERE e.contact_id = ${contact.id} AND e.team_id = ${teamId}
            AND e.name NOT IN ('email.opened', 'email.clicked', 'email.bot.opened', 'email.bot.clicked')
            AND ${cond(R_EVENT, 'e.occurred_at', 'e.id')}
          ORDER BY e.occurred_at ${dir}, e.id ${dir} LIMIT ${limit})
        UNION ALL
        (SELECT d.at, ${R_DECISION}, d.id, 'decision',
                jsonb_build_object('campaign_id', d.campaign_id, 'campaign_name', c.name, 'decision', d.decision, 'reason', d.reason,
                                   'event_id', d.event_id, 'event_name', ev.name, 'email_send_log_id', d.email_send_log_id)
           FROM (SELECT x.decided_at AS at, x.id, x.campaign_id, x.decision, x.reason, x.event_id, x.email_send_log_id
                   FROM campaign_decisions x
                  WHERE x.contact_id = ${contact.id} AND x.team_id = ${teamId} AND ${cond(R_DECISION, 'x.decided_at', 'x.id')}
                  ORDER BY x.decided_at ${dir}, x.id ${dir} LIMIT ${limit}) d
           LEFT JOIN campaigns c ON c.id = d.campaign_id AND c.team_id = ${teamId}
           LEFT JOIN events ev ON ev.id = d.event_id AND ev.team_id = ${teamId})
        UNION ALL
        (SELECT l.created_at, ${R_MESSAGE}, l.id, CASE WHEN l.status = 'suppressed' THEN 'message_suppressed' ELSE 'message_queued' END,
                jsonb_build_object('email_send_log_id', l.id, 'source', l.source, 'status', ${status('l.status')},
                                   'subject', l.subject, 'campaign_id', l.campaign_id, 'template_id', l.template_id,
                                   'mail_account_id', l.mail_account_id)
           FROM email_send_log l
          WHERE l.contact_id = ${contact.id} AND l.team_id = ${teamId} AND ${cond(R_MESSAGE, 'l.created_at', 'l.id')}
          ORDER BY l.created_at ${dir}, l.id ${dir} LIMIT ${limit})
        UNION ALL
        (SELECT l.updated_at, ${R_ENDED}, l.id, 'message_' || l.status,
                jsonb_build_object('email_send_log_id', l.id, 'reason', l.last_error, 'attempts', l.attempts)
           FROM email_send_log l
          WHERE l.contact_id = ${contact.id} AND l.team_id = ${teamId} AND l.status IN ('failed', 'cancelled')
            AND ${cond(R_ENDED, 'l.updated_at', 'l.id')}
          ORDER BY l.updated_at ${dir}, l.id ${dir} LIMIT ${limit})
        UNION ALL
        (SELECT h.created_at, ${R_HIT}, h.id, CASE WHEN h.kind = 'open' THEN 'opened' ELSE 'clicked' END,
                jsonb_build_object('email_send_log_id', h.email_send_log_id, 'verdict', CASE WHEN h.is_bot THEN 'bot' ELSE 'human' END,
                                   'is_bot', h.is_bot, 'bot_score', h.bot_score, 'signals', to_jsonb(h.reasons),
                                   'url', h.url, 'honeypot', h.kind = 'honeypot', 'counted', h.event_id IS NOT NULL)
           FROM tracking_hits h
          WHERE h.contact_id = ${contact.id} AND h.team_id = ${teamId} AND ${cond(R_HIT, 'h.created_at', 'h.id')}
          ORDER BY h.created_at ${dir}, h.id ${dir} LIMIT ${limit})
        UNION ALL
        (SELECT s.created_at, ${R_SUPPRESSION}, s.id, 'suppressed',
                jsonb_build_object('reason', s.reason, 'reasons', to_jsonb(s.reasons), 'email_send_log_id', s.message_id)
           FROM suppressions s
          WHERE s.team_id = ${teamId} AND s.email = ${contact.email} AND ${cond(R_SUPPRESSION, 's.created_at', 's.id')})
        UNION ALL
        (SELECT w.created_at, ${R_WEBHOOK}, w.id, 'webhook',
                jsonb_build_object('delivery_id', w.id, 'webhook_id', w.webhook_id, 'event', w.event, 'event_id', w.event_id,
                                   'status', w.status, 'attempts', w.attempts, 'response_code', w.response_code,
                                   'last_error', w.last_error)
           FROM webhook_deliveries w
          WHERE w.contact_id = ${contact.id} AND w.team_id = ${teamId} AND ${cond(R_WEBHOOK, 'w.created_at', 'w.id')}
          ORDER BY w.created_at ${dir}, w.id ${dir} LIMIT ${limit})
      ) t
     ORDER BY t.at ${dir}, t.rank ${dir}, t.id ${dir}
     LIMIT ${limit}`;
}

export type TimelinePage = { items: TimelineItem[]; nextCursor: string | null; page: number };

/** One page of the contact's timeline (the contact is the team's: the caller found it). */
export async function contactTimeline(
  db: Db,
  teamId: string,
  contact: { id: string; email: string },
  opts: { perPage: number; order: TimelineOrder; cursor?: string },
): Promise<TimelinePage> {
  const cursor = opts.cursor === undefined ? undefined : decodeCursor(opts.cursor);
  const { rows } = await timelineQuery(teamId, contact, { perPage: opts.perPage, order: opts.order, cursor }).execute(db);
  const page = cursor ? cursor.page + 1 : 1;
  const shown = rows.slice(0, opts.perPage);
  const last = shown[shown.length - 1];
  return {
    items: shown.map((r) => ({ at: r.at.toISOString(), type: r.type, detail: r.detail })),
    nextCursor: rows.length > opts.perPage && last ? encodeCursor({ at: last.at_us, rank: r(last.rank), id: last.id, page }) : null,
    page,
  };
}

const r = (n: number | string) => Number(n);
