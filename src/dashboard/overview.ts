// The dashboard's home page: a team's numbers at a glance. Every statement is
// scoped by team and bounded: a count reads at most COUNT_CAP + 1 index entries
// (contacts by the team index, sends and opens of the last days newest first by
// the indexes of migration 0017, the newest events by events_team_idx), so the
// page costs about the same on a team of 100 contacts and one of 1,000,000
// (measured in test/dashboard/perf.test.ts). Past the cap the page says "more
// than" instead of counting on: the overview is a glance, not a report.
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';

/** Days in the sends-and-opens table, today (UTC) included. */
export const OVERVIEW_DAYS = 7;
/** Each count stops here; past it the page shows "10000+". */
export const COUNT_CAP = 10_000;
export const RECENT_EVENTS = 10;

/** A count as shown: exact ("12"), a lower bound ("100000+", when the cap cut it) or "—" (before what was read). */
export type Shown = string;
export type DayRow = { day: string; sent: Shown; opened_human: Shown; opened_bot: Shown };

export type Overview = {
  contacts: { total: Shown; unsubscribed: Shown };
  days: DayRow[];
  totals: { sent: Shown; opened_human: Shown; opened_bot: Shown };
  campaigns: { total: number; active: number };
  webhooks: { enabled: number; failing: number; auto_disabled: number };
  recent: { id: string; name: string; email: string | null; contact_id: string | null; created_at: Date }[];
};


/** The start of the UTC day `daysBack` days before today. */
function utcDayStart(now: Date, daysBack: number): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - daysBack));
}

export async function overview(db: Db, teamId: string, opts: { now?: Date; cap?: number } = {}): Promise<Overview> {
  const now = opts.now ?? new Date();
  const cap = opts.cap ?? COUNT_CAP;
  const capped = (n: number): Shown => (n > cap ? `${cap}+` : String(n));
  const since = utcDayStart(now, OVERVIEW_DAYS - 1);
  const starts = Array.from({ length: OVERVIEW_DAYS + 1 }, (_, i) => utcDayStart(now, OVERVIEW_DAYS - 1 - i));
  // One count per day over the rows read, by plain timestamp comparisons (no per-row time-zone arithmetic).
  const perDay = (column: 'sent_at' | 'counted_at', extra = sql``) =>
    sql.join(starts.slice(0, -1).map((start, i) => sql`count(*) FILTER (WHERE ${sql.ref(column)} >= ${start} AND ${sql.ref(column)} < ${starts[i + 1]!} ${extra})::int`));
  const limit = cap + 1;
  const [contacts, sent, opens, counts, recent] = await Promise.all([
    sql<{ total: number; unsubscribed: number }>`
      SELECT (SELECT count(*) FROM (SELECT 1 FROM contacts WHERE team_id = ${teamId} LIMIT ${limit}) c)::int AS total,
             (SELECT count(*) FROM (SELECT 1 FROM contacts WHERE team_id = ${teamId} AND status = 'unsubscribed' LIMIT ${limit}) u)::int AS unsubscribed`.execute(db),
    // The newest sends of the window, at most the cap: when the cap cuts, the days
    // after the oldest one read are exact, that day is a lower bound, earlier ones unknown.
    sql<{ days: number[]; n: number; oldest: Date | null }>`
      SELECT ARRAY[${perDay('sent_at')}] AS days, count(*)::int AS n, min(sent_at) AS oldest
        FROM (SELECT sent_at FROM email_send_log
               WHERE team_id = ${teamId} AND sent_at IS NOT NULL AND sent_at >= ${since}
               ORDER BY sent_at DESC LIMIT ${limit}) s`.execute(db),
    // tracking_counted holds one open row per message and verdict (its key), with
    // the time that open last counted: a message counts once per verdict, on the
    // day of its latest counted open.
    sql<{ human: number[]; bot: number[]; n: number; oldest: Date | null }>`
      SELECT ARRAY[${perDay('counted_at', sql`AND NOT is_bot`)}] AS human, ARRAY[${perDay('counted_at', sql`AND is_bot`)}] AS bot,
             count(*)::int AS n, min(counted_at) AS oldest
        FROM (SELECT counted_at, is_bot FROM tracking_counted
               WHERE team_id = ${teamId} AND kind = 'open' AND counted_at >= ${since}
               ORDER BY counted_at DESC LIMIT ${limit}) o`.execute(db),
    sql<{ campaigns: number; active: number; enabled: number; failing: number; auto_disabled: number }>`
      SELECT (SELECT count(*) FROM campaigns WHERE team_id = ${teamId})::int AS campaigns,
             (SELECT count(DISTINCT campaign_id) FROM campaign_sends WHERE team_id = ${teamId} AND status = 'active')::int AS active,
             count(*) FILTER (WHERE is_enabled)::int AS enabled,
             count(*) FILTER (WHERE is_enabled AND failing_since IS NOT NULL)::int AS failing,
             count(*) FILTER (WHERE NOT is_enabled AND auto_disabled_at IS NOT NULL)::int AS auto_disabled
        FROM webhooks WHERE team_id = ${teamId}`.execute(db),
    sql<Overview['recent'][number]>`
      SELECT e.id, e.name, k.email, e.contact_id, e.created_at
        FROM (SELECT id, name, contact_id, created_at FROM events WHERE team_id = ${teamId}
               ORDER BY created_at DESC, id DESC LIMIT ${RECENT_EVENTS}) e
        LEFT JOIN contacts k ON k.id = e.contact_id AND k.team_id = ${teamId}
       ORDER BY e.created_at DESC, e.id DESC`.execute(db),
  ]);
  /** Shows day i's count of a capped read: exact after the oldest row's day, "N+" on it, "—" before. */
  const shown = (counts: number[], read: { n: number; oldest: Date | null } | undefined, i: number): Shown => {
    const n = counts[i] ?? 0;
    if (!read || read.n <= cap || !read.oldest) return String(n);
    const oldest = new Date(read.oldest);
    if (starts[i + 1]! <= oldest) return '—';
    return starts[i]! <= oldest ? `${n}+` : String(n);
  };
  const s = sent.rows[0];
  const o = opens.rows[0];
  const days: DayRow[] = starts.slice(0, -1).map((start, i) => ({
    day: start.toISOString().slice(0, 10),
    sent: shown(s?.days ?? [], s, i),
    opened_human: shown(o?.human ?? [], o, i),
    opened_bot: shown(o?.bot ?? [], o, i),
  }));
  const total = (counts: number[] | undefined, read: { n: number } | undefined): Shown => {
    const sum = (counts ?? []).reduce((a, b) => a + b, 0);
    return read && read.n > cap ? `${sum}+` : String(sum);
  };
  const c = contacts.rows[0]!;
  const n = counts.rows[0]!;
  return {
    contacts: { total: capped(c.total), unsubscribed: capped(c.unsubscribed) },
    days,
    totals: { sent: total(s?.days, s), opened_human: total(o?.human, o), opened_bot: total(o?.bot, o) },
    campaigns: { total: n.campaigns, active: n.active },
    webhooks: { enabled: n.enabled, failing: n.failing, auto_disabled: n.auto_disabled },
    recent: recent.rows,
  };
}
