// Reads of the events API: an event as the client sees it, and the campaign
// decisions it caused. Timestamps are formatted in SQL (ISO 8601 UTC with
// milliseconds) because the rows go out as they are; occurred_at, which the
// client gives, in any year (UTC year 0 or 10000 included) as JavaScript writes it.
import { sql } from 'kysely';
import { isoSql, isoSqlAnyYear } from '../db/iso.ts';
import type { Db } from '../db/pool.ts';

const iso = (column: string) => sql.raw(isoSql(column));

export async function findEventView(db: Db, teamId: string, id: string): Promise<Record<string, unknown> | undefined> {
  const { rows } = await sql<Record<string, unknown>>`
    SELECT e.id, e.team_id, e.name AS event_name, e.contact_id, coalesce(k.email, e.payload ->> 'email') AS email,
           e.idempotency_key, ${sql.raw(isoSqlAnyYear('e.occurred_at'))} AS occurred_at, ${iso('e.created_at')} AS created_at,
           ${iso('e.processed_at')} AS processed_at, coalesce(e.input, e.payload) AS payload, e.payload AS event_payload
      FROM events e LEFT JOIN contacts k ON k.id = e.contact_id AND k.team_id = e.team_id
     WHERE e.team_id = ${teamId} AND e.id = ${id}`.execute(db);
  return rows[0];
}

/** The event's campaign decisions, or undefined when the team has no such event. */
export async function findEventDecisions(
  db: Db,
  teamId: string,
  id: string,
): Promise<{ processed: boolean; decisions: Record<string, unknown>[] } | undefined> {
  const event = await db.selectFrom('events').select(['id', 'processed_at']).where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
  if (!event) return undefined;
  const { rows } = await sql<Record<string, unknown>>`
    SELECT d.id, d.campaign_id, c.name AS campaign_name, d.campaign_send_id, d.contact_id, d.decision, d.reason,
           d.email_send_log_id, l.status AS send_status, l.template_id, l.mail_account_id, ${iso('d.decided_at')} AS decided_at
      FROM campaign_decisions d
      LEFT JOIN campaigns c ON c.id = d.campaign_id AND c.team_id = d.team_id
      LEFT JOIN email_send_log l ON l.id = d.email_send_log_id AND l.team_id = d.team_id
     WHERE d.team_id = ${teamId} AND d.event_id = ${id}
     ORDER BY c.created_at, d.campaign_id`.execute(db);
  return { processed: event.processed_at !== null, decisions: rows };
}
