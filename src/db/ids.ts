// `column = ANY ($1::uuid[])`, or `column = $1::uuid` for one id (or text
// values: `::text`).
//
// PostgreSQL keeps a prepared statement's generic plan only when it is
// estimated no costlier than a custom one. A custom plan of `= ANY ($1)` sees
// the array's length, the generic one assumes ten elements: called with one
// id, the custom plan always looks cheaper, and the statement is planned at
// every execution, prepared or not (pg_prepared_statements: 0 generic plans of
// 12 on a 20,000-row table). Planning the send path's
// context read or the webhook fan-out costs more than running it, and many of
// them run for one id (a process_events job per ingested event, a send job per
// transactional message); written as a scalar, those are planned once per
// connection. docs/decisions.md, "Prepared statements".
import { sql, type RawBuilder } from 'kysely';

/**
 * `column` is written in code (never input): an optionally qualified column
 * name. `type` is the values' type: uuid (ids, the default) or text (e.g.
 * addresses).
 */
export function idIn(column: string, ids: readonly string[], type: 'uuid' | 'text' = 'uuid'): RawBuilder<unknown> {
  if (!/^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/.test(column)) throw new Error(`idIn: not a column name: ${column}`);
  if (type !== 'uuid' && type !== 'text') throw new Error(`idIn: not a type: ${String(type)}`);
  const t = sql.raw(type);
  return ids.length === 1 ? sql`${sql.raw(column)} = ${ids[0]}::${t}` : sql`${sql.raw(column)} = ANY (${ids}::${t}[])`;
}
