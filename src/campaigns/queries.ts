// Campaign SQL, one function per operation. Every statement is scoped by team.
// Campaigns are always read through one projection (campaignRows) that formats
// timestamps in SQL, so a campaign renders identically from create, get, list,
// start and stop.
import { escapeLike } from '../lib/text.ts';
import { sql, type RawBuilder, type Transaction } from 'kysely';
import { ISO_FORMAT, isoSqlAnyYear } from '../db/iso.ts';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import type { CampaignValue, SendDataValue, TriggerEvent } from './schemas.ts';
import { paginate } from '../lib/paginate.ts';

type Executor = Db | Transaction<Database>;

/** ISO 8601 UTC with milliseconds, as Date.toISOString() renders it (docs/api.md, "Identifiers, times, strings"). */
const iso = (column: RawBuilder<unknown>) => sql<string>`to_char(${column} AT TIME ZONE 'UTC', ${sql.raw(ISO_FORMAT)})`;

// Sends are aggregated per campaign in a LATERAL subquery: a page of campaigns
// with all their sends is one statement, not one per campaign.
function campaignRows(where: RawBuilder<unknown>, tail: RawBuilder<unknown> = sql``) {
  return sql<CampaignValue>`
    SELECT c.id, c.team_id, c.name, c.delivery_type, c.campaign_type, c.meta, c.draft_data,
           ${iso(sql`c.created_at`)} AS created_at, ${iso(sql`c.updated_at`)} AS updated_at,
           sends.campaign_sends
      FROM campaigns c
     CROSS JOIN LATERAL (
       SELECT coalesce(jsonb_agg(jsonb_build_object(
                'id', s.id,
                'campaign_id', s.campaign_id,
                'campaign_type', s.campaign_type,
                'status', s.status,
                -- A client's scheduled time may fall in UTC year 0 or 10000: written as send_data's (JavaScript's).
                'next_send_at', ${sql.raw(isoSqlAnyYear('s.next_send_at'))},
                'next_send_countdown', s.next_send_countdown,
                'send_data', s.send_data,
                'send_progress', CASE WHEN s.campaign_type IN ('broadcast', 'automation') THEN s.send_progress || (
                    SELECT jsonb_build_object(
                      'total_recipients', s.total_recipients, 'list_complete', s.list_built,
                      'current_iteration', s.current_iteration, 'pause_reason', s.pause_reason,
                      'sent', p.sent, 'bounced', p.bounced, 'remaining', p.remaining,
                      'total_sent', p.sent, 'total_bounced', p.bounced,
                      -- Messages attempted per minute over the last 5 minutes, and when the
                      -- remaining ones should be done at that pace (null when idle or done).
                      'rate_per_minute', round(p.recent / 5.0, 1),
                      'eta', CASE WHEN s.status = 'sending' AND p.remaining > 0 AND p.recent > 0
                                  THEN ${iso(sql`(now() + make_interval(secs => (p.remaining * 300.0 / p.recent)::float8))`)} END)
                      FROM (SELECT count(*) FILTER (WHERE l.status IN ('sent', 'delivered', 'bounced_soft', 'bounced_hard')) AS sent,
                                   count(*) FILTER (WHERE l.status IN ('bounced_soft', 'bounced_hard')) AS bounced,
                                   count(*) FILTER (WHERE l.status IN ('queued', 'deferred', 'sending')) AS remaining,
                                   count(*) FILTER (WHERE l.status IN ('sent', 'delivered', 'bounced_soft', 'bounced_hard')
                                                      AND coalesce(l.sent_at, l.bounced_at) > now() - interval '5 minutes') AS recent
                              FROM email_send_log l WHERE l.campaign_send_id = s.id AND l.team_id = s.team_id) p)
                  ELSE s.send_progress END,
                'created_at', ${iso(sql`s.created_at`)},
                'updated_at', ${iso(sql`s.updated_at`)}
              ) ORDER BY s.created_at DESC, s.id DESC), '[]'::jsonb) AS campaign_sends
         FROM campaign_sends s
        WHERE s.campaign_id = c.id AND s.team_id = c.team_id
     ) sends
     WHERE c.deleted_at IS NULL AND ${where}
     ${tail}`;
}

export async function getCampaign(db: Executor, teamId: string, id: string): Promise<CampaignValue | undefined> {
  const { rows } = await campaignRows(sql`c.team_id = ${teamId} AND c.id = ${id}`).execute(db);
  return rows[0];
}

export async function listCampaigns(
  db: Db,
  teamId: string,
  opts: { search?: string; page: number; perPage: number },
): Promise<{ campaigns: CampaignValue[]; total: number }> {
  const where = opts.search
    ? sql`c.team_id = ${teamId} AND c.name ILIKE ${`%${escapeLike(opts.search)}%`} ESCAPE '\\'`
    : sql`c.team_id = ${teamId}`;
  const { rows, total } = await paginate(
    opts,
    async () => (await sql<{ n: number }>`SELECT count(*) AS n FROM campaigns c WHERE c.deleted_at IS NULL AND ${where}`.execute(db)).rows[0]!.n,
    async (limit, offset) => (await campaignRows(where, sql`ORDER BY c.created_at DESC, c.id DESC LIMIT ${limit} OFFSET ${offset}`).execute(db)).rows,
  );
  return { campaigns: rows, total };
}

/**
 * The ids among `ids` that are active templates of the team. FOR SHARE: a
 * template cannot be archived or deleted between this check and the commit of
 * the campaign that uses it.
 */
export async function lockActiveTemplateIds(trx: Transaction<Database>, teamId: string, ids: string[]): Promise<Set<string>> {
  return lockActiveIds(trx, 'templates', teamId, ids);
}

/** As lockActiveTemplateIds, for mail accounts. */
export async function lockActiveMailAccountIds(trx: Transaction<Database>, teamId: string, ids: string[]): Promise<Set<string>> {
  return lockActiveIds(trx, 'mail_accounts', teamId, ids);
}

async function lockActiveIds(trx: Transaction<Database>, table: 'templates' | 'mail_accounts', teamId: string, ids: string[]): Promise<Set<string>> {
  const rows = await trx
    .selectFrom(table)
    .select('id')
    .where('team_id', '=', teamId)
    .where('status', '=', 'active')
    .where('id', 'in', ids)
    .forShare()
    .execute();
  return new Set(rows.map((r) => r.id));
}

/** Inserts an event-triggered campaign and its first send (status active); returns the campaign id. */
export async function insertEventCampaign(
  trx: Transaction<Database>,
  c: { teamId: string; name: string; events: TriggerEvent[]; sendData: SendDataValue; kind?: 'event_triggered' | 'broadcast' | 'automation' },
): Promise<{ campaignId: string; sendId: string }> {
  const kind = c.kind ?? 'event_triggered';
  const listed = kind !== 'event_triggered';
  const startAt = kind === 'broadcast' ? c.sendData.broadcast_send.scheduled_send_time
    : kind === 'automation' ? c.sendData.automation_send.scheduled_send_time : null;
  // jsonb values go as JSON text: pg would send a JS array as a PostgreSQL array.
  const sendData = JSON.stringify(c.sendData);
  const campaign = await trx
    .insertInto('campaigns')
    .values({
      team_id: c.teamId,
      name: c.name,
      delivery_type: kind === 'event_triggered' ? 'event' : kind,
      campaign_type: kind,
      meta: '[]',
      draft_data: JSON.stringify({ last_sent_at: null, send_data: c.sendData }),
      trigger_events: c.events,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  const send = await trx
    .insertInto('campaign_sends')
    .values({
      team_id: c.teamId,
      campaign_id: campaign.id,
      campaign_type: kind,
      status: listed ? 'scheduled' : 'active',
      next_send_at: startAt ? new Date(startAt) : null,
      send_data: sendData,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return { campaignId: campaign.id, sendId: send.id };
}

export type SendStatus = 'active' | 'paused' | 'completed' | 'failed' | 'scheduled' | 'sending' | 'cancelled';

export type TransitionResult =
  | { kind: 'changed' }
  | { kind: 'unchanged'; status: SendStatus }
  | { kind: 'no_send' };

/**
 * Moves the campaign's latest send from `from` to `to` in one statement. The
 * status condition is re-checked on the locked row (READ COMMITTED re-evaluates
 * the WHERE on the newest version), so of two racing calls exactly one changes
 * it. The status seen is returned so the caller can tell a no-op from a conflict.
 */
export async function transitionLatestSend(
  db: Db,
  teamId: string,
  campaignId: string,
  from: SendStatus,
  to: SendStatus,
): Promise<TransitionResult> {
  const { rows } = await sql<{ seen: SendStatus; changed: boolean }>`
    WITH latest AS (
      SELECT s.id, s.status
        FROM campaign_sends s
       WHERE s.campaign_id = ${campaignId} AND s.team_id = ${teamId}
         AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = s.campaign_id AND c.team_id = s.team_id AND c.deleted_at IS NULL)
       ORDER BY s.created_at DESC, s.id DESC
       LIMIT 1
    ), changed AS (
      UPDATE campaign_sends s
         SET status = ${to}, updated_at = now()
        FROM latest
       WHERE s.id = latest.id AND s.status = ${from}
      RETURNING s.campaign_id
    ), touched AS (
      -- Unreferenced, yet run: data-modifying CTEs always execute to completion.
      UPDATE campaigns c SET updated_at = now()
        FROM changed
       WHERE c.id = changed.campaign_id AND c.team_id = ${teamId}
      RETURNING c.id
    )
    SELECT latest.status AS seen, EXISTS (SELECT 1 FROM changed) AS changed FROM latest`.execute(db);
  const row = rows[0];
  if (!row) return { kind: 'no_send' };
  return row.changed ? { kind: 'changed' } : { kind: 'unchanged', status: row.seen };
}

export type DecisionFilter = { page: number; perPage: number; decision?: 'send' | 'skip'; reason?: string; sendId?: string };

/**
 * A page of a campaign's decisions, newest first (campaign_decisions_campaign_idx):
 * every recipient of a broadcast or automation send and every event of an
 * event-triggered campaign, sent or skipped with the reason. Filters: the
 * decision, the skip reason, one send.
 */
export async function listCampaignDecisions(db: Db, teamId: string, campaignId: string, f: DecisionFilter) {
  const where = sql`d.team_id = ${teamId} AND d.campaign_id = ${campaignId}
    ${f.decision ? sql`AND d.decision = ${f.decision}` : sql``}
    ${f.reason ? sql`AND d.reason = ${f.reason}` : sql``}
    ${f.sendId ? sql`AND d.campaign_send_id = ${f.sendId}` : sql``}`;
  return paginate(
    f,
    async () => (await sql<{ n: string }>`SELECT count(*) AS n FROM campaign_decisions d WHERE ${where}`.execute(db)).rows[0]!.n,
    async (limit, offset) =>
      (
        await sql<Record<string, unknown>>`
          SELECT d.id, d.campaign_id, c.name AS campaign_name, d.campaign_send_id, d.event_id, d.contact_id, k.email, d.decision, d.reason,
                 d.email_send_log_id, l.status AS send_status, l.template_id, l.mail_account_id, ${iso(sql`d.decided_at`)} AS decided_at
            FROM campaign_decisions d
            JOIN campaigns c ON c.id = d.campaign_id AND c.team_id = d.team_id
            LEFT JOIN contacts k ON k.id = d.contact_id AND k.team_id = d.team_id
            LEFT JOIN email_send_log l ON l.id = d.email_send_log_id AND l.team_id = d.team_id
           WHERE ${where}
           ORDER BY d.created_at DESC, d.id DESC
           LIMIT ${limit} OFFSET ${offset}`.execute(db)
      ).rows,
  );
}
