// The dashboard's home page: a team's numbers at a glance. Every statement is
// scoped by team and bounded, and each is an index scan of the team's range
// (contacts by the team index, sends and opens of the last days by the
// indexes of migration 0017, the newest events by events_team_idx), so the
// page costs about the same on a team of 100 contacts and one of 1,000,000
// (measured in test/dashboard/perf.test.ts).
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';

/** Days in the sends-and-opens table, today (UTC) included. */
export const OVERVIEW_DAYS = 7;
/** Contacts are counted exactly up to this many; past it the page says "more than". */
export const CONTACT_COUNT_CAP = 2_000_000;
export const RECENT_EVENTS = 10;

export type DayRow = { day: string; sent: number; opened_human: number; opened_bot: number };

export type Overview = {
  contacts: { total: number; capped: boolean; unsubscribed: number };
  days: DayRow[];
  totals: { sent: number; opened_human: number; opened_bot: number };
  campaigns: { total: number; active: number };
  webhooks: { enabled: number; failing: number; auto_disabled: number };
  recent: { id: string; name: string; email: string | null; contact_id: string | null; created_at: Date }[];
};

/** The start of the UTC day `daysBack` days before today. */
function utcDayStart(now: Date, daysBack: number): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - daysBack));
}

export async function overview(db: Db, teamId: string, now = new Date()): Promise<Overview> {
  const since = utcDayStart(now, OVERVIEW_DAYS - 1);
  const starts = Array.from({ length: OVERVIEW_DAYS + 1 }, (_, i) => utcDayStart(now, OVERVIEW_DAYS - 1 - i));
  // One count per day, by plain timestamp comparisons (no per-row time-zone
  // arithmetic): each is a pass over the same index range.
  const perDay = (column: 'sent_at' | 'counted_at', extra = sql``) =>
    sql.join(starts.slice(0, -1).map((start, i) => sql`count(*) FILTER (WHERE ${sql.ref(column)} >= ${start} AND ${sql.ref(column)} < ${starts[i + 1]!} ${extra})::int`));
  const [contacts, sent, opens, counts, recent] = await Promise.all([
    sql<{ total: number; unsubscribed: number }>`
      SELECT (SELECT count(*) FROM (SELECT 1 FROM contacts WHERE team_id = ${teamId} LIMIT ${CONTACT_COUNT_CAP + 1}) c)::int AS total,
             (SELECT count(*) FROM contacts WHERE team_id = ${teamId} AND status = 'unsubscribed')::int AS unsubscribed`.execute(db),
    sql<{ days: number[] }>`
      SELECT ARRAY[${perDay('sent_at')}] AS days
        FROM email_send_log
       WHERE team_id = ${teamId} AND sent_at IS NOT NULL AND sent_at >= ${since}`.execute(db),
    // tracking_counted holds one open row per message and verdict (its key), with
    // the time that open last counted: a message counts once per verdict, on the
    // day of its latest counted open.
    sql<{ human: number[]; bot: number[] }>`
      SELECT ARRAY[${perDay('counted_at', sql`AND NOT is_bot`)}] AS human, ARRAY[${perDay('counted_at', sql`AND is_bot`)}] AS bot
        FROM tracking_counted
       WHERE team_id = ${teamId} AND kind = 'open' AND counted_at >= ${since}`.execute(db),
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
  const sentDays = sent.rows[0]?.days ?? [];
  const human = opens.rows[0]?.human ?? [];
  const bot = opens.rows[0]?.bot ?? [];
  const days: DayRow[] = starts.slice(0, -1).map((start, i) => ({
    day: start.toISOString().slice(0, 10),
    sent: sentDays[i] ?? 0,
    opened_human: human[i] ?? 0,
    opened_bot: bot[i] ?? 0,
  }));
  const sum = (key: keyof Omit<DayRow, 'day'>) => days.reduce((n, d) => n + d[key], 0);
  const c = contacts.rows[0]!;
  const n = counts.rows[0]!;
  return {
    contacts: { total: Math.min(c.total, CONTACT_COUNT_CAP), capped: c.total > CONTACT_COUNT_CAP, unsubscribed: c.unsubscribed },
    days,
    totals: { sent: sum('sent'), opened_human: sum('opened_human'), opened_bot: sum('opened_bot') },
    campaigns: { total: n.campaigns, active: n.active },
    webhooks: { enabled: n.enabled, failing: n.failing, auto_disabled: n.auto_disabled },
    recent: recent.rows,
  };
}
