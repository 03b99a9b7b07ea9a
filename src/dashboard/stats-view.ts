// The dashboard's statistics panels (campaign page, overview, mail accounts):
// the same reads as the stats routes (stats/read.ts), over a period chosen by
// a link (?period=7d|30d|90d), drawn by charts.js with uPlot from a JSON data
// island (no inline script: CSP script-src 'self'), with a table of the same
// numbers and a CSV export (?format=csv) for every panel.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Db } from '../db/pool.ts';
import { STATS_KEYS } from '../db/schema-stats.ts';
import { sql } from 'kysely';
import { alignRange, breakdown, readStats, type StatsAnswer, type StatsScope } from '../stats/read.ts';
import { queryField } from './forms.ts';

export const PERIODS = {
  '2d': { days: 2, interval: 'hour', label: '48 hours, by hour' },
  '7d': { days: 7, interval: 'hour', label: '7 days, by hour' },
  '30d': { days: 30, interval: 'day', label: '30 days, by day' },
  '90d': { days: 90, interval: 'day', label: '90 days, by day' },
} as const;
export type Period = keyof typeof PERIODS;

/** Thresholds drawn on the rate chart: where mailbox providers act. */
export const PROVIDER_LIMITS = { bounce: 2, complaint: 0.3 };

export function periodOf(request: FastifyRequest): Period {
  const p = queryField(request.query, 'period', 4);
  return Object.hasOwn(PERIODS, p) ? (p as Period) : '30d';
}

/** The stats of a scope over a period ending now, in UTC. */
export async function periodStats(db: Db, teamId: string, scope: StatsScope, period: Period): Promise<StatsAnswer> {
  const { days, interval } = PERIODS[period];
  const to = new Date();
  const from = new Date(to.getTime() - days * 86_400_000);
  const range = await alignRange(db, from, to, interval, 'UTC');
  return readStats(db, teamId, scope, range, interval, 'UTC');
}

/** JSON for a <script type="application/json"> island: `<` escaped so no text can close the element. */
export function jsonIsland(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c').replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
}

/** What the stats partial (views/stats.liquid) needs. */
export function statsPanel(stats: StatsAnswer, period: Period, basePath: string) {
  return {
    period,
    periods: Object.entries(PERIODS).map(([key, p]) => ({ key, label: p.label, current: key === period })),
    totals: stats.totals,
    rates: stats.rates,
    rows: stats.series.filter((p) => STATS_KEYS.some((k) => p[k] !== 0)).reverse(),
    keys: STATS_KEYS,
    island: jsonIsland({ series: stats.series, interval: stats.interval, limits: PROVIDER_LIMITS }),
    csv: `${basePath}?period=${period}&format=csv`,
    basePath,
  };
}

/** CSV of the series: a header of the keys, one line per point, every point of the period. */
export function statsCsv(stats: StatsAnswer): string {
  const lines = [['at', ...STATS_KEYS].join(',')];
  for (const p of stats.series) lines.push([p.at, ...STATS_KEYS.map((k) => String(p[k]))].join(','));
  return lines.join('\r\n') + '\r\n';
}

export const wantsCsv = (request: FastifyRequest): boolean => queryField(request.query, 'format', 3) === 'csv';

/** The CSV answer (a download named after the panel). */
export function csvReply(reply: FastifyReply, stats: StatsAnswer, name: string): FastifyReply {
  return reply.code(200).type('text/csv; charset=utf-8')
    .header('content-disposition', `attachment; filename="${name.replace(/[^a-z0-9._-]/gi, '_')}.csv"`)
    .send(statsCsv(stats));
}

/**
 * The overview's table over the period: transactional mail, each campaign and
 * each mail account with their totals and rates (names looked up, deleted ones
 * marked), and the accounts whose health is not `ok`.
 */
export async function overviewBreakdown(db: Db, teamId: string, period: Period) {
  const to = new Date();
  const from = new Date(to.getTime() - PERIODS[period].days * 86_400_000);
  const rows = await breakdown(db, teamId, from, to);
  const campaignIds = rows.filter((r) => r.kind === 'campaign' && r.id).map((r) => r.id!);
  const accountIds = rows.filter((r) => r.kind === 'account' && r.id).map((r) => r.id!);
  const [campaigns, accounts, unhealthy] = await Promise.all([
    sql<{ id: string; name: string; deleted: boolean }>`
      SELECT id, name, deleted_at IS NOT NULL AS deleted FROM campaigns WHERE team_id = ${teamId}::uuid AND id = ANY (${campaignIds}::uuid[])`.execute(db),
    sql<{ id: string; from_email: string; deleted: boolean; health_state: string }>`
      SELECT id, from_email, deleted_at IS NOT NULL AS deleted, health_state FROM mail_accounts
       WHERE team_id = ${teamId}::uuid AND id = ANY (${accountIds}::uuid[])`.execute(db),
    sql<{ id: string; from_email: string; health_state: string }>`
      SELECT id, from_email, health_state FROM mail_accounts
       WHERE team_id = ${teamId}::uuid AND deleted_at IS NULL AND health_state <> 'ok' ORDER BY from_email`.execute(db),
  ]);
  const names = new Map(campaigns.rows.map((c) => [c.id, c] as const));
  const mailboxes = new Map(accounts.rows.map((a) => [a.id, a] as const));
  const line = (r: (typeof rows)[number]) => {
    if (r.kind === 'transactional') return { label: 'Transactional e-mail', href: '/emails', ...r };
    if (r.kind === 'campaign') {
      const c = r.id ? names.get(r.id) : undefined;
      return { label: c ? `${c.name}${c.deleted ? ' (deleted)' : ''}` : 'a removed campaign', href: c && !c.deleted ? `/campaigns/${r.id}` : null, ...r };
    }
    const a = r.id ? mailboxes.get(r.id) : undefined;
    return {
      label: a ? `${a.from_email}${a.deleted ? ' (deleted)' : ''}` : 'a removed account',
      href: a && !a.deleted ? `/mail-accounts/${r.id}/stats` : null, health: a?.health_state ?? 'ok', ...r,
    };
  };
  return {
    bySource: rows.filter((r) => r.kind !== 'account').map(line),
    byAccount: rows.filter((r) => r.kind === 'account').map(line),
    unhealthy: unhealthy.rows,
  };
}
