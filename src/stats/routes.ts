// The stats routes: GET /email/campaigns/{id}/stats, /email/emails/stats
// (transactional mail) and /email/mail-accounts/{id}/stats. Query: from, to
// (ISO date-times; default the last 30 days, or 2 days by hour), interval
// (hour | day, default day) and tz (an IANA zone, default UTC). Another team's
// campaign or account is 404.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type, type Static } from 'typebox';
import { sql } from 'kysely';
import { notFound, validationFailed } from '../lib/errors.ts';
import { dateTimeValue, UUID_RE, withErrors } from '../http/schemas.ts';
import { STATS_KEYS } from '../db/schema-stats.ts';
import type { Db } from '../db/pool.ts';
import { findMailAccount } from '../mail/accounts.ts';
import { alignRange, knownZone, MAX_POINTS, readStats, type StatsScope } from './read.ts';

const TAGS = ['stats'];
const Count = Type.Integer({ minimum: -1_000_000_000_000 });
const Counts = Object.fromEntries(STATS_KEYS.map((k) => [k, Count])) as Record<(typeof STATS_KEYS)[number], typeof Count>;
const Rate = Type.Union([Type.Number(), Type.Null()]);
const RATE_NAMES = ['delivery', 'bounce', 'human_open', 'human_click', 'click_to_open', 'unsubscribe', 'complaint'] as const;

export const StatsQuery = Type.Object({
  from: Type.Optional(Type.String({ format: 'date-time', description: 'Start (inclusive), widened to the start of its hour or day in `tz`. Default: 30 days (by day) or 2 days (by hour) before `to`.' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'End (exclusive), widened to the end of its hour or day in `tz`. Default: now.' })),
  interval: Type.Optional(Type.Union([Type.Literal('hour'), Type.Literal('day')], { description: 'Series step (default `day`).' })),
  tz: Type.Optional(Type.String({ maxLength: 64, description: 'IANA time zone of the hours and days (default `UTC`).' })),
}, { additionalProperties: false });
type Query = Static<typeof StatsQuery>;

export const StatsResponse = Type.Object({
  ok: Type.Literal(true),
  stats: Type.Object({
    from: Type.String({ format: 'date-time' }),
    to: Type.String({ format: 'date-time' }),
    interval: Type.String(),
    tz: Type.String(),
    totals: Type.Object(Counts),
    rates: Type.Object(Object.fromEntries(RATE_NAMES.map((k) => [k, Rate])) as Record<(typeof RATE_NAMES)[number], typeof Rate>),
    series: Type.Array(Type.Object({ at: Type.String({ format: 'date-time' }), ...Counts })),
  }),
});

const IdParams = Type.Object({ id: Type.String({ description: 'Id (UUID)' }) });

const DESCRIPTION =
  'Counts per hour or day (`series`, every slot of the range, zeros included), their `totals` and the `rates` ' +
  '(percent, two decimals; null when the denominator is zero). Opens and clicks count distinct messages, people ' +
  'and bots apart. An event counts in the slot of the time it happened. Exact: counts not yet folded into the ' +
  'stored buckets are added to every answer.';

async function answer(db: Db, teamId: string, scope: StatsScope, q: Query) {
  const interval = q.interval ?? 'day';
  const tz = q.tz ?? 'UTC';
  if (!(await knownZone(db, tz))) throw validationFailed([{ field: 'tz', message: 'not a known IANA time zone' }]);
  // dateTimeValue: a leap second or an offset of hours alone is a valid date-time, which new Date() reads as Invalid Date.
  const to = q.to ? dateTimeValue(q.to) : new Date();
  const from = q.from ? dateTimeValue(q.from) : new Date(to.getTime() - (interval === 'day' ? 30 : 2) * 86_400_000);
  if (!(from < to)) throw validationFailed([{ field: 'from', message: 'must be before to' }]);
  // Guard before asking the database to count slots over centuries.
  if (to.getTime() - from.getTime() > (interval === 'day' ? MAX_POINTS * 86_400_000 : MAX_POINTS * 3_600_000)) {
    throw validationFailed([{ field: 'from', message: `the range holds more than ${MAX_POINTS} ${interval}s` }]);
  }
  const range = await alignRange(db, from, to, interval, tz);
  if (range.points > MAX_POINTS) throw validationFailed([{ field: 'from', message: `the range holds more than ${MAX_POINTS} ${interval}s` }]);
  return { ok: true as const, stats: await readStats(db, teamId, scope, range, interval, tz) };
}

export const statsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db } = app.deps;
  const schema = (summary: string, params = false) => ({
    tags: TAGS, summary, description: DESCRIPTION, querystring: StatsQuery,
    ...(params ? { params: IdParams } : {}),
    response: withErrors({ 200: StatsResponse }, params ? [404] : []),
  });

  app.get('/campaigns/:id/stats', { schema: schema('Statistics of a campaign', true) }, async (request) => {
    const teamId = request.auth!.teamId;
    const { id } = request.params as { id: string };
    const found = UUID_RE.test(id)
      && (await sql`SELECT 1 FROM campaigns WHERE id = ${id}::uuid AND team_id = ${teamId}::uuid AND deleted_at IS NULL`.execute(db)).rows.length > 0;
    if (!found) throw notFound('campaign');
    return answer(db, teamId, { kind: 'campaign', id }, request.query);
  });

  app.get('/emails/stats', { schema: schema('Statistics of transactional mail') }, async (request) =>
    answer(db, request.auth!.teamId, { kind: 'transactional' }, request.query));

  app.get('/mail-accounts/:id/stats', { schema: schema('Statistics of a mail account (all its mail)', true) }, async (request) => {
    const teamId = request.auth!.teamId;
    const { id } = request.params as { id: string };
    if (!UUID_RE.test(id) || !(await findMailAccount(db, teamId, id))) throw notFound('mail account');
    return answer(db, teamId, { kind: 'account', id }, request.query);
  });
};
