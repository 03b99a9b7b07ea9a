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

/**
 * isoSql for any year, as JavaScript writes it: years 0 (1 BC) to 9999 in four
 * digits, others signed in six (`+010000-…`, `-000001-…`). For times a client
 * gives (an event's occurred_at may fall in UTC year 0 or 10000); the check
 * costs a little, so times the service makes keep isoSql.
 */
export function isoSqlAnyYear(col: string): string {
  const utc = `(${col} AT TIME ZONE 'UTC')`;
  const bc = `extract(year FROM ${utc})::int`;
  const year = `(CASE WHEN ${bc} < 0 THEN ${bc} + 1 ELSE ${bc} END)`;
  return `CASE WHEN ${col} >= '0001-01-01T00:00:00Z'::timestamptz AND ${col} < '10000-01-01T00:00:00Z'::timestamptz THEN ${isoSql(col)}
    ELSE (CASE WHEN ${year} > 9999 THEN '+' || lpad(${year}::text, 6, '0') WHEN ${year} < 0 THEN '-' || lpad((-${year})::text, 6, '0')
               ELSE lpad(${year}::text, 4, '0') END) || to_char(${utc}, '-MM-DD"T"HH24:MI:SS.MS"Z"') END`;
}

/**
 * A Date as text PostgreSQL reads back as the same instant in any year, for
 * times sent inside JSON (a Date parameter pg writes itself). toISOString()
 * is that text for UTC years 1 to 9999; its `+010000-…` and `0000-…` (1 BC)
 * PostgreSQL does not read, so those are written `10000-…` and `0001-… BC`.
 */
export function pgTimeText(d: Date): string {
  const iso = d.toISOString();
  const y = d.getUTCFullYear();
  if (y >= 1 && y <= 9999) return iso;
  const rest = iso.slice(iso.indexOf('-', 1)); // from the '-' after the year
  return y > 9999 ? `${y}${rest}` : `${String(1 - y).padStart(4, '0')}${rest} BC`;
}
