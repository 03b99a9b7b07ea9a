import type { Selectable } from 'kysely';
import type { ContactsTable } from '../db/schema.ts';
import { CONTACT_VIEW_FIELDS } from './schemas.ts';

/** docs/api.md, "Contacts": every field rendered as a string (ISO times, decimal counts), null where unknown. */
export function contactView(row: Selectable<ContactsTable>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const r = row as unknown as Record<string, unknown>;
  for (const f of CONTACT_VIEW_FIELDS) {
    // Every view column is text, a number, a boolean or a timestamp (db/schema.ts).
    const v = r[f] as string | number | boolean | Date | null | undefined;
    out[f] = v === null || v === undefined ? null : v instanceof Date ? v.toISOString() : String(v);
  }
  out.tags = row.tags;
  return out;
}
