// The `process_events` task: loads the events of a job and hands them to every
// registered handler. Handlers must be idempotent: a job that fails part-way
// is retried whole (graphile-worker backoff), so a handler may see an event twice.
import type { Task } from 'graphile-worker';
import { sql } from 'kysely';
import { idIn } from '../db/ids.ts';
import { PREPARED, type Db } from '../db/pool.ts';

export type EventRow = {
  id: string;
  team_id: string;
  name: string;
  contact_id: string | null;
  payload: Record<string, unknown>;
  occurred_at: Date;
  created_at: Date;
  /** Campaign decisions recorded (engine.ts); possibly by another job's batch. */
  decided_at?: Date | null;
};

export type EventHandler = (events: EventRow[]) => Promise<void>;

export function processEventsTask(db: Db, handlers: EventHandler[]): Task<'process_events'> {
  return async (payload) => {
    const ids = payload.event_ids ?? [];
    if (ids.length === 0) return;
    // Processed already (with another job's batch, or by an earlier run of this one): nothing left to do.
    const { rows: events } = await sql<EventRow>`${sql.raw(PREPARED)}
      SELECT id, team_id, name, contact_id, payload, occurred_at, created_at, decided_at FROM events
       WHERE ${idIn('id', ids)} AND processed_at IS NULL ORDER BY id`.execute(db);
    if (events.length === 0) return;
    for (const handle of handlers) await handle(events as EventRow[]);
    // Rows locked right now belong to a campaign decider that took these events
    // into its batch (campaigns/engine.ts): it marks them processed when it
    // commits, so they are skipped rather than waited for (a waiting job holds
    // a worker slot). FOR NO KEY UPDATE, the update's own lock: a transaction
    // that only references an event (a foreign-key check's FOR KEY SHARE) does
    // not make it skipped and left unprocessed.
    await sql`${sql.raw(PREPARED)}
      UPDATE events SET processed_at = now()
       WHERE id IN (SELECT id FROM events WHERE ${idIn('id', ids)} AND processed_at IS NULL FOR NO KEY UPDATE SKIP LOCKED)`.execute(db);
  };
}
