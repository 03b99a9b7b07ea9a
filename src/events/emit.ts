// The events bus. emit(tx, events) records business events and enqueues their
// processing in the caller's transaction, so a rolled-back change emits nothing and a
// committed one is never lost (the job commits with it). The webhook fan-out runs
// in the `process_events` task; a trigger a campaign listens to has no job: the
// decider loop (campaigns/decider.ts) finds it, decides it and fans it out.
import { sql, type RawBuilder, type Transaction } from 'kysely';
import type { Database } from '../db/schema.ts';
import { addJobs } from '../lib/jobs.ts';
import { PREPARED } from '../db/pool.ts';
import { TRIGGER_NAMES_TEXT } from './triggers.ts';

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

// SQL operands of the listener checks below: a qualified column (`x.name`: a
// bare name inside the checks' subqueries would mean their own table's
// column), a parameter cast to uuid (`$1::uuid`) or an event-name literal.
// Written in code, never input; checked so a slip cannot put anything else
// into a text.
const OPERAND = /^(\$\d+::uuid|[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*|'[a-z_.]+')$/;
function operand(expr: string): string {
  if (!OPERAND.test(expr)) throw new Error(`events: not an SQL operand written in code: ${expr}`);
  return expr;
}

/**
 * The name webhooks subscribe to for an event named by `column` (SQL): e-mail
 * and webhook events keep theirs, the others (contact, lead and sale events)
 * get `email.` in front. One spelling for the fan-out (webhooks/deliveries.ts)
 * and for the check that a webhook wants the event (webhookListensSql).
 */
export function webhookEventNameSql(column: string): string {
  const c = operand(column);
  return `CASE WHEN ${c} LIKE 'email.%' OR ${c} LIKE 'webhook.%' THEN ${c} ELSE 'email.' || ${c} END`;
}

export function webhookEventName(column: string): RawBuilder<unknown> {
  return sql.raw(webhookEventNameSql(column));
}

/**
 * SQL: a webhook of team `team` (enabled or not: a disabled one's deliveries
 * wait for its enable) subscribes to event `name`; the fan-out's match
 * (enqueueDeliveries in webhooks/deliveries.ts).
 */
export function webhookListensSql(team: string, name: string): string {
  return `EXISTS (SELECT 1 FROM webhooks listening_webhook
                  WHERE listening_webhook.team_id = ${operand(team)} AND ${webhookEventNameSql(name)} = ANY (listening_webhook.events))`;
}

/**
 * SQL: a campaign of team `team`, not deleted, lists event `name` among its
 * triggers; whatever its send's state, so the decider still records a paused
 * campaign's skips (campaigns/engine.ts, loadEventCandidates, decides the rest).
 * For a trigger event with a contact: without such a campaign there is nothing
 * to decide, and the event is recorded decided (docs/decisions.md, "Events
 * nobody handles get no job").
 */
export function campaignListensSql(team: string, name: string): string {
  // The first two conditions are campaigns_trigger_idx's (migration 0037): a
  // team's broadcasts and automations, which list no trigger, are not read.
  return `EXISTS (SELECT 1 FROM campaigns listening_campaign
                  WHERE listening_campaign.team_id = ${operand(team)} AND listening_campaign.deleted_at IS NULL
                    AND cardinality(listening_campaign.trigger_events) > 0 AND ${operand(name)} = ANY (listening_campaign.trigger_events))`;
}

/**
 * Who listens to one event being written, as SQL, for every statement that
 * writes events (emit() below, the upsert's events, both ingestion paths):
 * `join` (a CROSS JOIN LATERAL, so it may follow any FROM item) gives `l`,
 * whether the event is a trigger (`trigger`, an SQL condition written in code:
 * a campaign trigger with a contact), whether a campaign of team `team` lists
 * event `name` (for a trigger only), and whether a webhook of the team
 * subscribes to it. `processedAt` and `decidedAt` are the event's columns for
 * it: processed, with no job, when nothing listens (or when `handled`, an SQL
 * condition, is false: an unsubscribe that changed nothing); decided, with no
 * decisions, when it is a trigger that no campaign lists. A trigger a campaign
 * lists is left undecided and unprocessed for the decider loop
 * (campaigns/decider.ts), which processes what it decides. The statements
 * return needsJobSql(): the event needs a process_events job.
 */
export function listenersSql(team: string, name: string, trigger: string, handled = 'true'): { join: string; processedAt: string; decidedAt: string } {
  return {
    // OFFSET 0 keeps the subquery whole: pulled up into the statement, each
    // use of l.campaign became its own copy of the check (two index probes).
    join: `CROSS JOIN LATERAL (SELECT ${trigger} AS trigger, (${trigger}) AND ${campaignListensSql(team, name)} AS campaign,
                                      ${webhookListensSql(team, name)} AS webhook OFFSET 0) l`,
    processedAt: `CASE WHEN (${handled}) AND (l.campaign OR l.webhook) THEN NULL ELSE now() END`,
    decidedAt: `CASE WHEN l.trigger AND NOT l.campaign THEN now() END`,
  };
}

/**
 * SQL (a RETURNING expression of a statement that wrote an event): the event
 * needs a process_events job: something is left to process, and it is not a
 * trigger waiting for the campaign decider loop (campaigns/decider.ts), which
 * decides it and does the rest of its processing (the webhook fan-out) in
 * one transaction. The waiting condition is events_undecided_idx's predicate.
 * `table`: the events table's name or alias where the statement needs it.
 */
export function needsJobSql(table?: string): string {
  const c = (column: string) => (table === undefined ? column : operand(`${table}.${column}`));
  return `${c('processed_at')} IS NULL
          AND NOT (${c('decided_at')} IS NULL AND ${c('contact_id')} IS NOT NULL AND ${c('name')} IN ${TRIGGER_NAMES_TEXT})`;
}

const NEEDS_JOB = needsJobSql();

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
  // job: no campaign of its team is triggered by it (a trigger name with a
  // contact, listed by a campaign: the decider), and no webhook of its team
  // subscribes to it (the fan-out). A trigger event with a contact that no
  // campaign lists is recorded decided as well, so no later decider takes it
  // up. A team without webhooks paid a process_events job (enqueue, fetch, two
  // statements, completion) for each batch of e-mails sent and each open or
  // click, and a team without trigger campaigns for each contact saved, to
  // find nothing to do. A webhook or campaign whose creation commits after
  // this statement's snapshot does not get such an event (docs/decisions.md,
  // "Events nobody handles get no job").
  // Prepared: unnamed, it was planned at every call (177 µs for a batch of
  // results in `bench campaigns`' latency run), more than it took to run.
  const who = listenersSql('x.team_id', 'x.name', `x.contact_id IS NOT NULL AND x.name IN ${TRIGGER_NAMES_TEXT}`);
  const { rows: inserted } = await sql<{ id: string; pending: boolean }>`${sql.raw(PREPARED)}
    INSERT INTO events (team_id, name, contact_id, payload, occurred_at, processed_at, decided_at)
    SELECT x.team_id, x.name, x.contact_id, x.payload, coalesce(x.occurred_at, now()), ${sql.raw(who.processedAt)}, ${sql.raw(who.decidedAt)}
    FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
      AS x(team_id uuid, name text, contact_id uuid, payload jsonb, occurred_at timestamptz)
    ${sql.raw(who.join)}
    RETURNING id, ${sql.raw(NEEDS_JOB)} AS pending`.execute(tx);
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

/** The id of the team's event with this idempotency key (undefined: none, or no longer). */
export async function eventWithKey(tx: Transaction<Database>, teamId: string, key: string): Promise<string | undefined> {
  const { rows } = await sql<{ id: string }>`${sql.raw(PREPARED)}
    SELECT id FROM events WHERE team_id = ${teamId} AND idempotency_key = ${key}`.execute(tx);
  return rows[0]?.id;
}

/**
 * Inserts the event row, or returns the id of the event that already has this
 * key (`id` undefined when that event went between the conflict and the read:
 * erased or expired).
 */
export async function claimEvent(
  tx: Transaction<Database>,
  e: EventInsert,
): Promise<{ id: string; occurred_at: Date; duplicate: false } | { id: string | undefined; duplicate: true }> {
  // Prepared (src/db/pool.ts): an ingested unsubscribe (ingest/ingest.ts) and a
  // campaign submit claim their row here.
  const { rows } = await sql<{ id: string; occurred_at: Date }>`${sql.raw(PREPARED)}
    INSERT INTO events (team_id, name, idempotency_key, occurred_at, input)
    VALUES (${e.teamId}, ${e.name}, ${e.key ?? null}, coalesce(${e.occurredAt ?? null}::timestamptz, now()),
            ${e.input === null ? null : JSON.stringify(e.input)}::jsonb)
    ON CONFLICT (team_id, idempotency_key) DO NOTHING
    RETURNING id, occurred_at`.execute(tx);
  if (rows[0]) return { ...rows[0], duplicate: false };
  return { id: await eventWithKey(tx, e.teamId, e.key!), duplicate: true };
}
