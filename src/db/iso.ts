// Times written by PostgreSQL as JavaScript's Date#toISOString() writes them:
// UTC, milliseconds (both truncate the microseconds). For UTC years 1 to 9999
// only: outside them JavaScript writes a sign and six digits (`+010000-…`),
// and year 0 (1 BC) as `0000`.

/** to_char's format for it, as an SQL literal. */
export const ISO_FORMAT = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;

/** The timestamptz expression `col` (SQL written in code, never input) as ISO text. */
export function isoSql(col: string): string {
  return `to_char(${col} AT TIME ZONE 'UTC', ${ISO_FORMAT})`;
}
