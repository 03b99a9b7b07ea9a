// The dashboard's home page: a team's numbers at a glance. Every statement is
// scoped by team and bounded: the contact counts read at most COUNT_CAP + 1
// index entries and say "more than" past it; the mail of the last days comes
// from the statistics buckets (src/stats/, the same numbers and definitions as
// the stats API and the panels below it, exact at any size); the newest events
// by events_team_idx. The page costs about the same on a team of 100 contacts
// and one of 1,000,000 (measured in test/dashboard/perf.test.ts).
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { readStats } from '../stats/read.ts';

/** Days in the sends-and-opens table, today (UTC) included. */
export const OVERVIEW_DAYS = 7;
/** Each contact count stops here; past it the page shows "10000+". */
export const COUNT_CAP = 10_000;
export const RECENT_EVENTS = 10;

/** A count as shown: exact ("12") or a lower bound ("10000+", when the cap cut it). */
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
  const until = utcDayStart(now, -1);
  const limit = cap + 1;
  const [contacts, mail, counts, recent] = await Promise.all([
    sql<{ total: number; unsubscribed: number }>`
      SELECT (SELECT count(*) FROM (SELECT 1 FROM contacts WHERE team_id = ${teamId} LIMIT ${limit}) c)::int AS total,
             (SELECT count(*) FROM (SELECT 1 FROM contacts WHERE team_id = ${teamId} AND status = 'unsubscribed' LIMIT ${limit}) u)::int AS unsubscribed`.execute(db),
    // Sent and opened per UTC day, from the statistics buckets (a message counts once per
    // verdict, on the day of its first open of that verdict: docs/glossary.md).
    readStats(db, teamId, { kind: 'team' }, { from: since, to: until }, 'day', 'UTC'),
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
  const days: DayRow[] = mail.series.map((p) => ({
    day: p.at.slice(0, 10),
    sent: String(p.sent),
    opened_human: String(p.opened_human),
    opened_bot: String(p.opened_bot),
  }));
  const c = contacts.rows[0]!;
  const n = counts.rows[0]!;
  return {
    contacts: { total: capped(c.total), unsubscribed: capped(c.unsubscribed) },
    days,
    totals: { sent: String(mail.totals.sent), opened_human: String(mail.totals.opened_human), opened_bot: String(mail.totals.opened_bot) },
    campaigns: { total: n.campaigns, active: n.active },
    webhooks: { enabled: n.enabled, failing: n.failing, auto_disabled: n.auto_disabled },
    recent: recent.rows,
  };
}
