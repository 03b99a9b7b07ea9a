// A batch's rows as a FROM item, with the planner told how many there are.
//
// PostgreSQL estimates every set-returning function at 100 rows, whatever it
// returns. A batch of 4 claims or 25 results joined by id to the message log
// (or to contacts) then looked, to the planner, like a quarter of a young
// table: below some 25,000 rows it chose a hash join over a sequential scan of
// the whole table, once per batch, and the cost of every claim grew with the
// log until the plan flipped. In `npm run bench -- campaigns` the claim and
// the result update read 300-865 pages per call that way, a third of
// PostgreSQL's time per e-mail (pg_stat_statements). A literal `LIMIT` of at
// least the array's length gives the planner (nearly) the true size and changes
// nothing else: a probe of the primary key per row, at any table size.
//
// The literal is the batch's size class (1, 2, 3, 4, 6, 8, 12, 16, 24, ...: at
// most 1.5 times the true size), not the size itself, so that a statement has a
// few texts rather than one per batch size, and a statement marked PREPARED
// (src/db/pool.ts) is planned a few times per connection and then runs on its
// generic plan. Its row estimate is the literal, the same in the generic and the
// custom plans, so PostgreSQL keeps the generic one. Written with each size, the
// send path's result and claim statements were planned at every call: 0.3-1 ms
// each, more than they took to run (pg_stat_statements, `bench campaigns`).
import { sql, type RawBuilder } from 'kysely';

/** The smallest of 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, ... (2^k and 1.5 × 2^k) that is at least `n`. */
export function sizeClass(n: number): number {
  if (n <= 2) return n;
  let p = 2;
  while (p * 2 < n) p *= 2;
  return n <= p * 1.5 ? p * 1.5 : p * 2;
}

/**
 * `(SELECT * FROM jsonb_to_recordset(json) AS <definition> LIMIT c)`, with `c`
 * the size class of `n` (the array's length): use as
 * `FROM ${recordset(JSON.stringify(list), list.length, 'x (id uuid, ...)')} AS x`.
 * `definition` is the alias and its column list, written in code (never input).
 */
export function recordset(json: string, n: number, definition: string): RawBuilder<unknown> {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`recordset: a row count, got ${n}`);
  return sql`(SELECT * FROM jsonb_to_recordset(${json}::jsonb) AS ${sql.raw(definition)} LIMIT ${sql.lit(sizeClass(n))})`;
}

/** A list of ids as `recordset()` rows `x (id uuid)`: use as `FROM ${idsRecordset(ids)} AS x`. */
export function idsRecordset(ids: readonly string[]): RawBuilder<unknown> {
  return recordset(JSON.stringify(ids.map((id) => ({ id }))), ids.length, 'x (id uuid)');
}
