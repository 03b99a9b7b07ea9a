// A batch's rows as a FROM item, with the planner told how many there are.
//
// PostgreSQL estimates every set-returning function at 100 rows, whatever it
// returns. A batch of 4 claims or 25 results joined by id to the message log
// (or to contacts) then looked, to the planner, like a quarter of a young
// table: below some 25,000 rows it chose a hash join over a sequential scan of
// the whole table, once per batch, and the cost of every claim grew with the
// log until the plan flipped. In `npm run bench -- campaigns` the claim and
// the result update read 300-865 pages per call that way, a third of
// PostgreSQL's time per e-mail (pg_stat_statements). `LIMIT n`, a literal
// equal to the array's length, gives the planner the true size and changes
// nothing else: a probe of the primary key per row, at any table size.
import { sql, type RawBuilder } from 'kysely';

/**
 * `(SELECT * FROM jsonb_to_recordset(json) AS <definition> LIMIT n)`: use as
 * `FROM ${recordset(JSON.stringify(list), list.length, 'x (id uuid, ...)')} AS x`.
 * `definition` is the alias and its column list, written in code (never input).
 */
export function recordset(json: string, n: number, definition: string): RawBuilder<unknown> {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`recordset: a row count, got ${n}`);
  return sql`(SELECT * FROM jsonb_to_recordset(${json}::jsonb) AS ${sql.raw(definition)} LIMIT ${sql.lit(n)})`;
}
