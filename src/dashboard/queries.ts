// Read queries of the dashboard pages. Every statement is scoped by team and
// bounded (LIMIT, keyset cursors on indexed columns), so a page costs the same
// on a team with 100 contacts and one with 100,000 (see test/dashboard/perf.test.ts).
import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../db/pool.ts';
import { escapeLike } from '../lib/text.ts';
import { envelopeOf } from '../webhooks/deliveries.ts';

export const CAMPAIGNS_PER_PAGE = 20;
export const CONTACTS_PER_PAGE = 50;

export type CampaignSummary = {
  id: string;
  name: string;
  campaign_type: string;
  trigger_events: string[];
  created_at: Date;
  status: string | null;
  sends: { id: string; status: string; created_at: string; total_sent: number; total_bounced: number }[];
  sent: number;
  opened: number;
  opened_bot: number;
  clicked: number;
  clicked_bot: number;
  bounced: number;
};

/** A campaign's counts as the dashboard shows them, summed over statistics rows (buckets or deltas). */
const TOTALS = sql.raw(`coalesce(sum(sent), 0) AS sent, coalesce(sum(opened_human), 0) AS opened, coalesce(sum(opened_bot), 0) AS opened_bot,
  coalesce(sum(clicked_human), 0) AS clicked, coalesce(sum(clicked_bot), 0) AS clicked_bot,
  coalesce(sum(bounced_hard + bounced_soft), 0) AS bounced`);

/**
 * A campaign's all-time counts from the statistics buckets and the deltas not
 * yet folded (src/stats/): sent, opened and clicked by people and by bots
 * (messages, each once per verdict), bounced. The buckets are read by their
 * (team_id, source, campaign_id) prefix: a few rows per 15 minutes of the
 * campaign's life, whatever its number of messages. The definitions are the
 * stats API's (docs/glossary.md).
 */
function campaignTotals(campaignId: RawBuilder<unknown>, teamId: RawBuilder<unknown>) {
  const cols = sql.raw('sent, opened_human, opened_bot, clicked_human, clicked_bot, bounced_hard, bounced_soft');
  return sql`(
    SELECT ${TOTALS}
      FROM (SELECT ${cols} FROM stats_buckets b WHERE b.team_id = ${teamId} AND b.source = 'campaign' AND b.campaign_id = ${campaignId}
            UNION ALL
            SELECT ${cols} FROM stats_deltas d WHERE d.team_id = ${teamId} AND d.source = 'campaign' AND d.campaign_id = ${campaignId}) x
  )`;
}

/**
 * A page of campaigns, newest first, after the campaign `before` (keyset on
 * campaigns_team_idx). Each has its five latest sends and its counts from the
 * statistics (buckets and deltas, as campaignTotals); the sends' progress counters are a floor for
 * sent and bounced, for sends recorded before the statistics existed.
 */
export async function campaignPage(db: Db, teamId: string, before: string | undefined): Promise<CampaignSummary[]> {
  const cursor = before
    ? sql`AND (c.created_at, c.id) < (SELECT b.created_at, b.id FROM campaigns b WHERE b.team_id = ${teamId} AND b.id = ${before})`
    : sql``;
  // The team's unfolded deltas are read once for the page (grouped by campaign), not once per campaign.
  const { rows } = await sql<CampaignSummary>`
    WITH pending AS MATERIALIZED (
      SELECT campaign_id, ${TOTALS} FROM stats_deltas WHERE team_id = ${teamId} AND source = 'campaign' GROUP BY campaign_id
    )
    SELECT c.id, c.name, c.campaign_type, c.trigger_events, c.created_at,
           sends.list -> 0 ->> 'status' AS status, sends.list AS sends,
           greatest(b.sent + coalesce(p.sent, 0), sends.total_sent)::int AS sent,
           (b.opened + coalesce(p.opened, 0))::int AS opened, (b.opened_bot + coalesce(p.opened_bot, 0))::int AS opened_bot,
           (b.clicked + coalesce(p.clicked, 0))::int AS clicked, (b.clicked_bot + coalesce(p.clicked_bot, 0))::int AS clicked_bot,
           greatest(b.bounced + coalesce(p.bounced, 0), sends.total_bounced)::int AS bounced
      FROM campaigns c
     CROSS JOIN LATERAL (
       SELECT coalesce(jsonb_agg(jsonb_build_object(
                'id', s.id, 'status', s.status, 'created_at', s.created_at,
                'total_sent', coalesce((s.send_progress ->> 'total_sent')::numeric, 0),
                'total_bounced', coalesce((s.send_progress ->> 'total_bounced')::numeric, 0))
              ORDER BY s.created_at DESC, s.id DESC), '[]'::jsonb) AS list,
              coalesce(sum((s.send_progress ->> 'total_sent')::numeric), 0) AS total_sent,
              coalesce(sum((s.send_progress ->> 'total_bounced')::numeric), 0) AS total_bounced
         FROM (SELECT * FROM campaign_sends s
                WHERE s.campaign_id = c.id AND s.team_id = c.team_id
                ORDER BY s.created_at DESC, s.id DESC LIMIT 5) s
     ) sends
     CROSS JOIN LATERAL (
       SELECT ${TOTALS} FROM stats_buckets WHERE team_id = c.team_id AND source = 'campaign' AND campaign_id = c.id
     ) b
      LEFT JOIN pending p ON p.campaign_id = c.id
     WHERE c.team_id = ${teamId} AND c.deleted_at IS NULL ${cursor}
     ORDER BY c.created_at DESC, c.id DESC
     LIMIT ${CAMPAIGNS_PER_PAGE + 1}`.execute(db);
  return rows;
}

export type ContactRow = {
  id: string;
  email: string;
  status: string;
  first_name: string | null;
  last_name: string | null;
  tags: string[];
  sent_count: number;
  opens_count: number;
  clicks_count: number;
  created_at: Date;
};

/** The string just after every string that starts with `prefix` (in code point order), if simple to form. */
function prefixEnd(prefix: string): string | undefined {
  const chars = Array.from(prefix);
  const last = chars.pop()!.codePointAt(0)!;
  // Past U+D7FF the next code point is a surrogate: no bound, the LIKE still filters.
  return last < 0xd7ff ? chars.join('') + String.fromCodePoint(last + 1) : undefined;
}

/**
 * Contacts whose e-mail starts with `prefix`, in e-mail order, after `after`:
 * a range scan on the (team_id, email) unique index. The range is exact under
 * the C collation (the embedded server's); the LIKE keeps the answer right
 * under any other collation, where the range only narrows the scan.
 */
export async function contactPage(db: Db, teamId: string, prefix: string, after: string): Promise<ContactRow[]> {
  let q = db
    .selectFrom('contacts')
    .select(['id', 'email', 'status', 'first_name', 'last_name', 'tags', 'sent_count', 'opens_count', 'clicks_count', 'created_at'])
    .where('team_id', '=', teamId);
  if (prefix) {
    const end = prefixEnd(prefix);
    q = q.where('email', '>=', prefix).where(sql<boolean>`email LIKE ${escapeLike(prefix) + '%'}`);
    if (end) q = q.where('email', '<', end);
  }
  if (after) q = q.where('email', '>', after);
  return q.orderBy('email').limit(CONTACTS_PER_PAGE + 1).execute();
}

export async function findContact(db: Db, teamId: string, id: string) {
  return db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
}

export const DELIVERIES_PER_PAGE = 20;

/** A page of a webhook's delivery log, newest first, keyset on webhook_deliveries_webhook_idx. */
export async function deliveryPage(
  db: Db,
  teamId: string,
  webhookId: string,
  status: 'pending' | 'success' | 'failed' | undefined,
  before: string | undefined,
) {
  let q = db
    .selectFrom('webhook_deliveries')
    .select(['id', 'event', 'status', 'response_code', 'response_body', 'attempts', 'attempt_log', 'next_attempt_at', 'last_error', 'simulated', 'created_at'])
    .select(envelopeOf('webhook_deliveries').as('payload'))
    .where('team_id', '=', teamId)
    .where('webhook_id', '=', webhookId);
  if (status) q = q.where('status', '=', status);
  if (before) {
    q = q.where(
      sql<boolean>`(created_at, id) < (SELECT b.created_at, b.id FROM webhook_deliveries b WHERE b.webhook_id = ${webhookId} AND b.id = ${before})`,
    );
  }
  return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(DELIVERIES_PER_PAGE + 1).execute();
}

/** The team's first active contact by e-mail (a preview never defaults to an unsubscribed or bounced one). */
export async function firstActiveContact(db: Db, teamId: string) {
  return db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('status', '=', 'active').orderBy('email').limit(1).executeTakeFirst();
}

export const CAMPAIGN_ROWS_PER_PAGE = 20;

const keyset = (table: string, teamId: string, before: string | undefined) =>
  before
    ? sql`AND (x.created_at, x.id) < (SELECT b.created_at, b.id FROM ${sql.table(table)} b WHERE b.team_id = ${teamId} AND b.id = ${before})`
    : sql``;

export type CampaignMessageRow = {
  id: string;
  email: string;
  status: string;
  subject: string | null;
  template_name: string | null;
  from_email: string | null;
  attempts: number;
  created_at: Date;
  sent_at: Date | null;
  first_opened_at: Date | null;
  first_clicked_at: Date | null;
  last_error: string | null;
};

/** A page of the campaign's messages, newest first, after the message `before` (email_send_log_campaign_idx). */
export async function campaignMessagePage(db: Db, teamId: string, campaignId: string, before: string | undefined): Promise<CampaignMessageRow[]> {
  const { rows } = await sql<CampaignMessageRow>`
    SELECT x.id, x.email, x.status, x.subject, t.name AS template_name, a.from_email, x.attempts, x.created_at, x.sent_at,
           x.first_opened_at, x.first_clicked_at, x.last_error
      FROM email_send_log x
      LEFT JOIN templates t ON t.id = x.template_id AND t.team_id = x.team_id
      LEFT JOIN mail_accounts a ON a.id = x.mail_account_id AND a.team_id = x.team_id
     WHERE x.campaign_id = ${campaignId} AND x.team_id = ${teamId} ${keyset('email_send_log', teamId, before)}
     ORDER BY x.created_at DESC, x.id DESC
     LIMIT ${CAMPAIGN_ROWS_PER_PAGE + 1}`.execute(db);
  return rows;
}

export type CampaignDecisionRow = {
  id: string;
  decision: 'send' | 'skip';
  reason: string | null;
  event_name: string | null;
  contact_id: string | null;
  email: string | null;
  email_send_log_id: string | null;
  send_status: string | null;
  decided_at: Date;
};

/** A page of the campaign's decisions (why each event did or did not send), newest first (campaign_decisions_campaign_idx). */
export async function campaignDecisionPage(db: Db, teamId: string, campaignId: string, before: string | undefined): Promise<CampaignDecisionRow[]> {
  const { rows } = await sql<CampaignDecisionRow>`
    SELECT x.id, x.decision, x.reason, e.name AS event_name, x.contact_id, k.email, x.email_send_log_id, l.status AS send_status, x.decided_at
      FROM campaign_decisions x
      LEFT JOIN events e ON e.id = x.event_id AND e.team_id = x.team_id
      LEFT JOIN contacts k ON k.id = x.contact_id AND k.team_id = x.team_id
      LEFT JOIN email_send_log l ON l.id = x.email_send_log_id AND l.team_id = x.team_id
     WHERE x.campaign_id = ${campaignId} AND x.team_id = ${teamId} ${keyset('campaign_decisions', teamId, before)}
     ORDER BY x.created_at DESC, x.id DESC
     LIMIT ${CAMPAIGN_ROWS_PER_PAGE + 1}`.execute(db);
  return rows;
}

/**
 * The campaign's all-time counts (campaignTotals) and its messages still
 * waiting (queued, being sent or deferred: an index range of
 * email_send_log_campaign_send_idx per send).
 */
export async function campaignCounts(db: Db, teamId: string, campaignId: string) {
  const { rows } = await sql<{ sent: number; opened: number; opened_bot: number; clicked: number; clicked_bot: number; bounced: number; queued: number }>`
    SELECT t.sent::int, t.opened::int, t.opened_bot::int, t.clicked::int, t.clicked_bot::int, t.bounced::int,
           (SELECT count(*) FROM campaign_sends s JOIN email_send_log l ON l.campaign_send_id = s.id
             WHERE s.campaign_id = ${campaignId} AND s.team_id = ${teamId} AND l.status IN ('queued', 'sending', 'deferred'))::int AS queued
      FROM ${campaignTotals(sql`${campaignId}::uuid`, sql`${teamId}::uuid`)} t`.execute(db);
  return rows[0]!;
}

export async function campaignParts(db: Db, teamId: string, templateIds: string[], accountIds: string[]) {
  const [templates, accounts] = await Promise.all([
    templateIds.length
      ? db.selectFrom('templates').select(['id', 'name', 'status']).where('team_id', '=', teamId).where('id', 'in', templateIds).execute()
      : [],
    accountIds.length
      ? db.selectFrom('mail_accounts').select(['id', 'from_email', 'status']).where('team_id', '=', teamId).where('id', 'in', accountIds).execute()
      : [],
  ]);
  return { templates, accounts };
}
