// The events bus. emit(tx, events) records business events and enqueues their
// processing in the caller's transaction, so a rolled-back change emits nothing and a
// committed one is never lost (the job commits with it). Handlers (webhook
// fan-out, campaign triggers) run in the `process_events` task.
import { sql, type RawBuilder, type Transaction } from 'kysely';
import type { Database } from '../db/schema.ts';
import { addJobs } from '../lib/jobs.ts';
import { PREPARED } from '../db/pool.ts';
import { TRIGGER_NAMES_SQL } from './triggers.ts';

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
  | 'email.complained'
  | 'email.bot.opened'
  | 'email.bot.clicked'
  | 'webhook.disabled'
  | 'email.account.health';

export type NewEvent = {
  teamId: string;
  name: EventName;
  contactId?: string | null;
  payload: Record<string, unknown>;
  occurredAt?: Date | string;
};

/**
 * The name webhooks subscribe to for an event named by `column` (SQL): e-mail
 * and webhook events keep theirs, the others (contact, lead and sale events)
 * get `email.` in front. One spelling for the fan-out (webhooks/deliveries.ts)
 * and for emit()'s check that a webhook wants the event. `column` is written in
 * code, never input.
 */
export function webhookEventName(column: string): RawBuilder<unknown> {
  if (!/^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/.test(column)) throw new Error(`webhookEventName: not a column name: ${column}`);
  const c = sql.raw(column);
  return sql`CASE WHEN ${c} LIKE 'email.%' OR ${c} LIKE 'webhook.%' THEN ${c} ELSE 'email.' || ${c} END`;
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
  // An event that no handler has work for is recorded processed, without a
  // job: not a campaign trigger with a contact (the decider), and no webhook of
  // its team subscribed to it (the fan-out; the same name mapping,
  // webhookEventName, and match as enqueueDeliveries in webhooks/deliveries.ts). A team without webhooks paid
  // a process_events job (enqueue, fetch, two statements, completion) for each
  // batch of e-mails sent and each open or click, to find nothing to do. A
  // webhook whose creation commits after this statement's snapshot does not
  // get such an event; events recorded before a webhook existed may or may not
  // reach it (one with a job is fanned out when its job runs), as before
  // (docs/decisions.md, "Events nobody handles get no job").
  // Prepared: unnamed, it was planned at every call (177 µs for a batch of
  // results in `bench campaigns`' latency run), more than it took to run.
  const { rows: inserted } = await sql<{ id: string; pending: boolean }>`${sql.raw(PREPARED)}
    INSERT INTO events (team_id, name, contact_id, payload, occurred_at, processed_at)
    SELECT x.team_id, x.name, x.contact_id, x.payload, coalesce(x.occurred_at, now()),
           CASE WHEN (x.contact_id IS NOT NULL AND x.name IN ${TRIGGER_NAMES_SQL})
                  OR EXISTS (SELECT 1 FROM webhooks w
                              WHERE w.team_id = x.team_id
                                AND ${webhookEventName('x.name')} = ANY (w.events))
                THEN NULL ELSE now() END
    FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
      AS x(team_id uuid, name text, contact_id uuid, payload jsonb, occurred_at timestamptz)
    RETURNING id, processed_at IS NULL AS pending`.execute(tx);
  await enqueueEventProcessing(tx, inserted.filter((r) => r.pending).map((r) => r.id));
  return inserted.map((r) => r.id);
}

/** The `process_events` jobs of committed-with-the-caller events, EVENTS_PER_JOB to a job. */
export async function enqueueEventProcessing(tx: Transaction<Database>, ids: string[]): Promise<void> {
  const jobs = [];
  for (let i = 0; i < ids.length; i += EVENTS_PER_JOB) jobs.push({ payload: { event_ids: ids.slice(i, i + EVENTS_PER_JOB) } });
  await addJobs(tx, 'process_events', jobs);
}

type EventInsert = { teamId: string; name: string; key?: string; occurredAt?: string; input: Record<string, unknown> | null };

/** Inserts the event row, or returns the id of the event that already has this key. */
export async function claimEvent(tx: Transaction<Database>, e: EventInsert): Promise<{ id: string; occurred_at: Date; duplicate: boolean }> {
  // Prepared (src/db/pool.ts): every ingested event but a key-less
  // contact.saved claims its row here.
  const { rows } = await sql<{ id: string; occurred_at: Date }>`${sql.raw(PREPARED)}
    INSERT INTO events (team_id, name, idempotency_key, occurred_at, input)
    VALUES (${e.teamId}, ${e.name}, ${e.key ?? null}, coalesce(${e.occurredAt ?? null}::timestamptz, now()),
            ${e.input === null ? null : JSON.stringify(e.input)}::jsonb)
    ON CONFLICT (team_id, idempotency_key) DO NOTHING
    RETURNING id, occurred_at`.execute(tx);
  if (rows[0]) return { ...rows[0], duplicate: false };
  const first = await sql<{ id: string; occurred_at: Date }>`${sql.raw(PREPARED)}
    SELECT id, occurred_at FROM events WHERE team_id = ${e.teamId} AND idempotency_key = ${e.key!}`.execute(tx);
  return { ...first.rows[0], duplicate: true };
}
