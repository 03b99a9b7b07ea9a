// The business events that trigger campaigns: the decider's work (campaigns/engine.ts),
// the events emit() records without a job when no webhook wants them either, and the
// campaign routes' accepted trigger names. One list for code and SQL.
import { sql } from 'kysely';

/** Event names that trigger campaigns (the short names of docs/api.md, "Webhook events"). */
export const TRIGGER_EVENTS = ['contact.saved', 'lead.created', 'sale.created'] as const;
export type TriggerEvent = (typeof TRIGGER_EVENTS)[number];

export const TRIGGER_EVENT_NAMES: ReadonlySet<string> = new Set(TRIGGER_EVENTS);

/**
 * The list as SQL, `name IN (…)`'s right side, spelled as literals: the partial
 * index events_undecided_idx (migration 0008) names the same list, and the
 * planner uses a partial index only when it can prove the query's condition
 * implies the index's predicate, which it cannot for a parameter.
 * test/db/batch-plans.test.ts checks that the index's predicate is this list.
 */
export const TRIGGER_NAMES_TEXT = `(${TRIGGER_EVENTS.map((n) => {
  if (!/^[a-z_.]+$/.test(n)) throw new Error(`trigger event name not safe as an SQL literal: ${n}`);
  return `'${n}'`;
}).join(', ')})`;
export const TRIGGER_NAMES_SQL = sql.raw(TRIGGER_NAMES_TEXT);
