// emit(tx, events): records business events and enqueues their processing in
// the caller's transaction, so a rolled-back change emits nothing and a
// committed one is never lost (the job commits with it). Handlers (webhook
// fan-out, campaign triggers) run in the `process_events` task.
import { sql, type Transaction } from 'kysely';
import type { Database } from '../db/schema.ts';

/** Business events (campaign-trigger names) and e-mail events (webhook names). */
export type EventName =
  | 'contact.saved'
  | 'contact.unsubscribed'
  | 'lead.created'
  | 'sale.created'
  | 'email.sent'
  | 'email.delivered'
  | 'email.deferred'
  | 'email.bounced.soft'
  | 'email.bounced.hard'
  | 'email.opened'
  | 'email.clicked'
  | 'email.replied'
  | 'email.bot.opened'
  | 'email.bot.clicked'
  | 'webhook.disabled';

export type NewEvent = {
  teamId: string;
  name: EventName;
  contactId?: string | null;
  payload: Record<string, unknown>;
  occurredAt?: Date | string;
};

/** The webhook catalog name (interface.md 6.1) of an event. */
export function webhookEventName(name: string): string {
  return name.startsWith('email.') ? name : `email.${name}`;
}

// One job per this many events: a 1,000-contact bulk upsert is 2 jobs, not 1,000.
const EVENTS_PER_JOB = 500;

export async function emit(tx: Transaction<Database>, events: NewEvent[]): Promise<string[]> {
  if (events.length === 0) return [];
  const rows = events.map((e) => ({
    team_id: e.teamId,
    name: e.name,
    contact_id: e.contactId ?? null,
    payload: e.payload,
    occurred_at: e.occurredAt instanceof Date ? e.occurredAt.toISOString() : (e.occurredAt ?? null),
  }));
  const { rows: inserted } = await sql<{ id: string }>`
    INSERT INTO events (team_id, name, contact_id, payload, occurred_at)
    SELECT x.team_id, x.name, x.contact_id, x.payload, coalesce(x.occurred_at, now())
    FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
      AS x(team_id uuid, name text, contact_id uuid, payload jsonb, occurred_at timestamptz)
    RETURNING id`.execute(tx);
  const ids = inserted.map((r) => r.id);
  const specs = [];
  for (let i = 0; i < ids.length; i += EVENTS_PER_JOB) {
    specs.push({ identifier: 'process_events', payload: { event_ids: ids.slice(i, i + EVENTS_PER_JOB) }, max_attempts: 25 });
  }
  await sql`SELECT graphile_worker.add_jobs(
      ARRAY(SELECT json_populate_recordset(NULL::graphile_worker.job_spec, ${JSON.stringify(specs)}::json)))`.execute(tx);
  return ids;
}
