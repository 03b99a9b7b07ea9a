// The `process_events` task: loads the events of a job and hands them to every
// registered handler (the webhook fan-out: tasks.ts). Handlers must be
// idempotent: a job that fails part-way is retried whole (graphile-worker
// backoff), so a handler may see an event twice. Campaign triggers are not
// decided here: a trigger a campaign lists has no job, and the decider loop
// (campaigns/decider.ts) decides it, also when a job of an earlier version
// carries it.
import type { Task } from 'graphile-worker';
import { sql } from 'kysely';
import { idIn } from '../db/ids.ts';
import { PREPARED, type Db } from '../db/pool.ts';
import { needsJobSql } from './emit.ts';

const NEEDS_JOB = needsJobSql();

export type EventRow = {
  id: string;
  team_id: string;
  name: string;
  contact_id: string | null;
  payload: Record<string, unknown>;
  occurred_at: Date;
  created_at: Date;
};

export type EventHandler = (events: EventRow[]) => Promise<void>;

export function processEventsTask(db: Db, handlers: EventHandler[]): Task<'process_events'> {
  return async (payload) => {
    const ids = payload.event_ids ?? [];
    if (ids.length === 0) return;
    // Processed already (by an earlier run of this one), or a trigger waiting for the
    // decider loop, which fans it out and marks it processed with its decisions (a job
    // of an earlier version may carry one): nothing to do here. NEEDS_JOB says both.
    const { rows: events } = await sql<EventRow>`${sql.raw(PREPARED)}
      SELECT id, team_id, name, contact_id, payload, occurred_at, created_at FROM events
       WHERE ${idIn('id', ids)} AND ${sql.raw(NEEDS_JOB)} ORDER BY id`.execute(db);
    if (events.length === 0) return;
    for (const handle of handlers) await handle(events as EventRow[]);
    // Rows locked right now are skipped rather than waited for (a waiting job
    // holds a worker slot). FOR NO KEY UPDATE, the update's own lock: a
    // transaction that only references an event (a foreign-key check's FOR KEY
    // SHARE) does not make it skipped and left unprocessed.
    await sql`${sql.raw(PREPARED)}
      UPDATE events SET processed_at = now()
       WHERE id IN (SELECT id FROM events WHERE ${idIn('id', ids)} AND ${sql.raw(NEEDS_JOB)} FOR NO KEY UPDATE SKIP LOCKED)`.execute(db);
  };
}
