// Reading and editing single contacts: the filtered list, get by id or
// address, and PATCH (fields, custom fields, tags replaced, added or removed).
import { CompiledQuery, sql, type Selectable, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { ContactsTable, Database } from '../db/schema.ts';
import { emit } from '../events/emit.ts';
import { validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { paginate, type PageRequest } from '../lib/paginate.ts';
import { escapeLike, normalizeEmail } from '../lib/text.ts';
import { CONTACT_FIELDS, CUSTOM_FIELD_NAMES } from './fields.ts';
import { MIRRORED_STATUS, savedPayload } from './queries.ts';
import type { ContactPatchBodyT } from './schemas.ts';

export type ContactRow = Selectable<ContactsTable>;

export type ContactFilter = PageRequest & {
  status?: ContactRow['status'];
  tag?: string;
  /** Prefix of the address (normalised here). */
  search?: string;
  createdAfter?: Date;
  createdBefore?: Date;
};

/**
 * The team's contacts, newest first. Each filter has an index (0014): status
 * (team, status, created_at), prefix (team, email text_pattern_ops), tag (GIN
 * on tags), created range (team, created_at).
 */
export async function listContacts(db: Db, teamId: string, f: ContactFilter) {
  const q = contactListQueries(db, teamId, f);
  return paginate(
    f,
    async () => (await q.count.executeTakeFirstOrThrow()).n,
    (limit, offset) => q.page(limit, offset).execute(),
  );
}

/** The count and page queries of a filtered list (exported so a test or benchmark can EXPLAIN the real thing). */
export function contactListQueries(db: Db, teamId: string, f: Omit<ContactFilter, 'page' | 'perPage'>) {
  let q = db.selectFrom('contacts').where('team_id', '=', teamId);
  if (f.status) q = q.where('status', '=', f.status);
  if (f.tag !== undefined) q = q.where(sql<boolean>`tags @> ARRAY[${f.tag.trim()}]::text[]`);
  if (f.search) q = q.where(sql<boolean>`email LIKE ${escapeLike(normalizeEmail(f.search)) + '%'}`);
  if (f.createdAfter) q = q.where('created_at', '>=', f.createdAfter);
  if (f.createdBefore) q = q.where('created_at', '<', f.createdBefore);
  return {
    count: q.select((eb) => eb.fn.countAll<number>().as('n')),
    page: (limit: number, offset: number) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset),
  };
}

export async function findContactById(db: Db | Transaction<Database>, teamId: string, id: string): Promise<ContactRow | undefined> {
  return db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
}

/** Problems of a PATCH body the schema cannot see (before any SQL). */
export function patchProblems(body: ContactPatchBodyT): ErrorDetail[] {
  const out: ErrorDetail[] = [];
  if (body.tags !== undefined && (body.add_tags !== undefined || body.remove_tags !== undefined)) {
    out.push({ field: 'tags', message: 'replaces every tag: send either `tags` or `add_tags`/`remove_tags`, not both' });
  }
  if (body.add_tags && body.remove_tags) {
    const removed = new Set(body.remove_tags.map((t) => t.trim()));
    const both = [...new Set(body.add_tags.map((t) => t.trim()))].filter((t) => removed.has(t));
    if (both.length > 0) out.push({ field: 'add_tags', message: `a tag cannot be both added and removed: ${both.slice(0, 5).join(', ')}` });
  }
  return out;
}

/** The body's writable fields (nested custom fields first, top level wins), as the upsert reads them. */
function fieldPatch(body: ContactPatchBodyT): Record<string, unknown> {
  const patch: Record<string, unknown> = {};
  for (const [k, v] of Object.entries((body.custom_fields ?? {}) as Record<string, unknown>)) if (CUSTOM_FIELD_NAMES.has(k)) patch[k] = v;
  for (const f of CONTACT_FIELDS) if (f.name in body) patch[f.name] = body[f.name];
  if (typeof patch.country_code === 'string') patch.country_code = patch.country_code.toUpperCase();
  return patch;
}

/** The contact's tags after the patch: replaced, or stored minus removed plus added, each once, in order. */
function nextTags(stored: string[], body: ContactPatchBodyT): string[] {
  if (body.tags !== undefined) return [...new Set(body.tags.map((t) => t.trim()))];
  const removed = new Set((body.remove_tags ?? []).map((t) => t.trim()));
  const out = new Set(stored.filter((t) => !removed.has(t)));
  for (const t of body.add_tags ?? []) out.add(t.trim());
  return [...out];
}

const valueOf = (f: { name: string; kind: string }) => (f.kind === 'text' ? `i.p->>'${f.name}'` : `(i.p->>'${f.name}')::${f.kind}`);
const keptOrNew = (f: { name: string; kind: string }) => `CASE WHEN i.p ? '${f.name}' THEN ${valueOf(f)} ELSE k.${f.name} END`;
const names = CONTACT_FIELDS.map((f) => f.name);

// Writes only when something changes (like the upsert), so an empty or
// repeated PATCH records no event and starts no campaign.
const PATCH_SQL = `
UPDATE contacts k SET
  ${CONTACT_FIELDS.map((f) => `${f.name} = ${keptOrNew(f)}`).join(',\n  ')},
  tags = $4::text[],
  ${MIRRORED_STATUS},
  updated_at = now()
FROM (SELECT $3::jsonb AS p) i
WHERE k.team_id = $1::uuid AND k.id = $2::uuid
  AND ((${names.map((x) => `k.${x}`).join(', ')}) IS DISTINCT FROM (${CONTACT_FIELDS.map(keptOrNew).join(', ')})
       OR k.tags IS DISTINCT FROM $4::text[])
RETURNING k.*`;

/**
 * Applies a PATCH to the team's contact `id` (undefined when there is none)
 * and emits contact.saved when it changed, exactly as an upsert's save does:
 * webhooks and campaigns triggered by contact.saved see it.
 */
export async function patchContact(
  tx: Transaction<Database>,
  teamId: string,
  id: string,
  body: ContactPatchBodyT,
  maxTags: number,
): Promise<{ contact: ContactRow; changed: boolean } | undefined> {
  const current = await tx.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('id', '=', id).forUpdate().executeTakeFirst();
  if (!current) return undefined;
  const tags = nextTags(current.tags, body);
  const stored = new Set(current.tags);
  // The cap stops growth: a contact already over a lowered cap may still lose tags.
  if (tags.length > maxTags && tags.some((t) => !stored.has(t))) {
    const field = body.tags !== undefined ? 'tags' : 'add_tags';
    throw validationFailed(
      [{ field, message: `the contact would have ${tags.length} tags; at most ${maxTags} tags per contact (CONTACT_MAX_TAGS)` }],
      'too many tags for a contact',
    );
  }
  const { rows } = await tx.executeQuery<ContactRow>(CompiledQuery.raw(PATCH_SQL, [teamId, id, JSON.stringify(fieldPatch(body)), tags]));
  const updated = rows[0];
  if (!updated) return { contact: current, changed: false };
  await emit(tx, [{ teamId, name: 'contact.saved', contactId: updated.id, payload: savedPayload(updated) }]);
  return { contact: updated, changed: true };
}
