// CSV export of a team's contacts: keyset pages of 1,000 over (team_id, email)
// (the unique index), so memory stays flat and no page costs more than the
// first. Tags are one column, `;`-separated, as the import reads them.
import type { Writable } from 'node:stream';
import { stringify } from 'csv-stringify';
import type { Db } from '../db/pool.ts';
import { CONTACT_VIEW_FIELDS } from './schemas.ts';

const PAGE = 1000;
export const EXPORT_COLUMNS = [...CONTACT_VIEW_FIELDS.filter((f) => f !== 'team_id'), 'tags'] as const;

// A contact column holds text, a number, a boolean, a timestamp or (tags) an array of text.
type Cell = string | number | boolean | Date | string[] | null | undefined;
const cell = (v: Cell): string =>
  v === null || v === undefined ? '' : v instanceof Date ? v.toISOString() : Array.isArray(v) ? v.join(';') : String(v);

export async function exportContacts(db: Db, teamId: string, out: Writable): Promise<number> {
  const csv = stringify({ header: true, columns: [...EXPORT_COLUMNS] });
  const finished = new Promise<void>((ok, fail) => {
    csv.on('error', fail);
    out.on('error', fail);
    csv.on('end', ok);
  });
  csv.pipe(out, { end: false });
  let after: string | null = null;
  let total = 0;
  for (;;) {
    let q = db.selectFrom('contacts').selectAll().where('team_id', '=', teamId);
    if (after !== null) q = q.where('email', '>', after);
    const rows = await q.orderBy('email').limit(PAGE).execute();
    for (const row of rows) {
      const r = row as Record<string, unknown>;
      // Waiting on a slow reader (a pipe) keeps at most one page in memory.
      if (!csv.write(EXPORT_COLUMNS.map((c) => cell(r[c] as Cell)))) await new Promise((ok) => csv.once('drain', ok));
    }
    total += rows.length;
    if (rows.length < PAGE) break;
    after = rows[rows.length - 1].email;
  }
  csv.end();
  await finished;
  return total;
}
