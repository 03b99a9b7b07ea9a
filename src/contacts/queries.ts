// Contact writes. Every batch path is one set-based statement over a JSON array
// (no per-row round trips); the single upsert is a batch of one.
import { CompiledQuery, sql, type Transaction } from 'kysely';
import { isoSql } from '../db/iso.ts';
import { PREPARED, type Db } from '../db/pool.ts';
import { sizeClass } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';
import { emit, enqueueEventProcessing, listenersSql, needsJobSql } from '../events/emit.ts';
import { suppress, suppressedStatusSql } from './suppressions.ts';
import { CONTACT_FIELDS, CUSTOM_FIELD_NAMES } from './fields.ts';
import { validationFailed } from '../lib/errors.ts';
import type { ContactInputT } from './schemas.ts';
import { escapeLike, normalizeEmail } from '../lib/text.ts';
import { paginate, type PageRequest } from '../lib/paginate.ts';

/** A validated, normalised contact: only the keys the client sent (absent keeps, null clears). */
export type ContactPatch = { email: string; tags: string[] } & Record<string, unknown>;

/** Where an address's tag problems are reported: `tags` for one upsert, `contacts[i].tags` in a bulk. */
export type TagField = (index: number) => string;
export const bulkTagField: TagField = (i) => `contacts[${i}].tags`;

export type NormalisedContacts = {
  patches: ContactPatch[];
  /** The request index where each address first appears, for error details. */
  firstIndex: Map<string, number>;
};

const tooManyTags = (n: number, max: number) =>
  `the contact would have ${n} tags; at most ${max} tags per contact (CONTACT_MAX_TAGS)`;

/**
 * Normalises inputs (nested custom_fields, trimmed lower-case e-mail, upper-case
 * country, request tags added) and merges duplicates of one address, later
 * fields winning and tags accumulating. The tags of an address are a Set, so
 * 1,000 copies of one contact merge in linear time (an array lookup per tag
 * was quadratic: 1,000 copies of 100 tags took 8.7 s). An address whose
 * request tags alone pass `maxTags` is refused here, before any SQL.
 */
export function normaliseContacts(
  contacts: ContactInputT[],
  requestTags: string[] = [],
  opts: { maxTags?: number; field?: TagField } = {},
): NormalisedContacts {
  const maxTags = opts.maxTags ?? Infinity;
  const field = opts.field ?? bulkTagField;
  const byEmail = new Map<string, { patch: ContactPatch; tags: Set<string> }>();
  const firstIndex = new Map<string, number>();
  const shared = requestTags.map((t) => t.trim());
  contacts.forEach((c, index) => {
    const patch: Record<string, unknown> = {};
    const nested = (c.custom_fields ?? {}) as Record<string, unknown>;
    for (const [k, v] of Object.entries(nested)) if (CUSTOM_FIELD_NAMES.has(k)) patch[k] = v;
    for (const [k, v] of Object.entries(c)) {
      if (k === 'custom_fields' || k === 'tags' || k === 'email') continue;
      patch[k] = v; // top level wins over nested
    }
    if (typeof patch.country_code === 'string') patch.country_code = patch.country_code.toUpperCase();
    const email = normalizeEmail(c.email);
    let entry = byEmail.get(email);
    if (entry) Object.assign(entry.patch, patch);
    else {
      entry = { patch: { ...patch, email, tags: [] }, tags: new Set() };
      byEmail.set(email, entry);
      firstIndex.set(email, index);
    }
    for (const t of c.tags ?? []) entry.tags.add(t.trim());
    for (const t of shared) entry.tags.add(t);
  });
  const details = [];
  const patches: ContactPatch[] = [];
  for (const [email, { patch, tags }] of byEmail) {
    if (tags.size > maxTags) details.push({ field: field(firstIndex.get(email)!), message: tooManyTags(tags.size, maxTags) });
    patch.tags = [...tags];
    patches.push(patch);
  }
  if (details.length > 0) throw validationFailed(details, 'too many tags for a contact');
  return { patches, firstIndex };
}

/** normaliseContacts without the index map (no tag cap unless given). */
export function toPatches(contacts: ContactInputT[], requestTags: string[] = [], opts: { maxTags?: number; field?: TagField } = {}): ContactPatch[] {
  return normaliseContacts(contacts, requestTags, opts).patches;
}

const valueOf = (f: { name: string; kind: string }) =>
  f.kind === 'text' ? `i.p->>'${f.name}'` : `(i.p->>'${f.name}')::${f.kind}`;
const keptOrNew = (f: { name: string; kind: string }) =>
  `CASE WHEN i.p ? '${f.name}' THEN ${valueOf(f)} ELSE k.${f.name} END`;
const names = CONTACT_FIELDS.map((f) => f.name);
const SAVED_COLUMNS = 'id, email, first_name, last_name, phone, foreign_id, country_code, created_at, updated_at';

// One statement: insert the new addresses, update the existing ones that change,
// report per row. The UPDATE sees the statement's snapshot, so it touches
// exactly the rows that existed before (the INSERT's conflicts); rows the other
// branch did not see (inserted concurrently) come back as "missing" and are
// retried by the caller. Unchanged rows are not written at all.
// The UPDATE and \`pre\` find a contact only through the input's (team_id, email)
// pair, a column of the materialised \`input\`, never through a constant
// \`k.team_id = $1\`: with the constant, the planner may scan the whole team
// (contacts_team_created_idx) and filter, which it prefers while its statistics
// still see the team as small, as they do during an import that grows it
// (or with no statistics at all). That scan is linear in the team: 52 ms per
// batch of 1,000 at 20,000 rows, 201 ms at 200,000. Joined on the pair, its
// only choices are a probe of the (team_id, email) index per input row or a
// scan of the whole table, priced from the table's real size, which the planner
// always knows: the probe wins on any table worth the difference.
// Still team-scoped: every input row carries $1.
// Stored tags first, then the new ones in request order, each once. Hashing
// (GROUP BY, EXCEPT) instead of \`t <> ALL (k.tags)\` or \`@>\`, which compare
// every pair: linear in the tags, not quadratic.
const MERGED_TAGS = `ARRAY(
      SELECT m.t FROM (
        SELECT u.t, min(u.o) AS o FROM (
          SELECT a.t, a.o FROM unnest(k.tags) WITH ORDINALITY AS a(t, o)
          UNION ALL SELECT b.t, cardinality(k.tags) + b.o FROM unnest(i.tags) WITH ORDINALITY AS b(t, o)
        ) u GROUP BY u.t
      ) m ORDER BY m.o)`;

// An active contact whose address is on the suppression list takes the list's
// status when it is written (contacts.status mirrors the list; a contact made
// before the entry was mirrored when the entry was added).
export const MIRRORED_STATUS = `status = CASE WHEN k.status = 'active' THEN COALESCE(${suppressedStatusSql('k.team_id', 'k.email')}, 'active') ELSE k.status END,
    unsubscribed_at = CASE WHEN k.status = 'active' AND ${suppressedStatusSql('k.team_id', 'k.email')} = 'unsubscribed' THEN now() ELSE k.unsubscribed_at END`;

// Tags of the request the contact does not have yet.
const ADDED_TAGS = `(SELECT count(*) FROM (SELECT unnest(i.tags) EXCEPT SELECT unnest(k.tags)) n)`;

// The tag cap ($3) is checked by the UPDATE itself, on the row version it
// updates (after waiting for a concurrent writer, PostgreSQL rechecks the WHERE
// on the new version), so two concurrent upserts cannot pass it together: a
// row over it is left alone and reported by \`pre\` (added, stored).
// The contact.saved events of the rows written are inserted by the statement
// itself: their payload (savedPayload() below, built here in SQL) never makes
// a round trip through Node, where turning 1,000 returned rows into Dates, then
// payload objects, then one JSON text for PostgreSQL to parse again was about
// a sixth of the API process's time per 1,000-contact bulk upsert.
// Only the new events' ids come back, for their processing jobs.
// A contact.saved nobody handles (no campaign of the team triggered by it, no
// webhook subscribed) is recorded decided and processed, with no job, as emit()
// records it (events/emit.ts), and one a campaign listens to is left to the
// decider loop (campaigns/decider.ts); only the others (a webhook's alone)
// come back as 'event' rows.
const SAVED_LISTENERS = listenersSql('$1::uuid', "'contact.saved'", 'true');
const EVENTS_CTE = `,
ev AS (
  INSERT INTO events (team_id, name, contact_id, payload, processed_at, decided_at)
  SELECT $1::uuid, 'contact.saved', s.id, ${savedPayloadSql('s')}, ${SAVED_LISTENERS.processedAt}, ${SAVED_LISTENERS.decidedAt}
  FROM (SELECT * FROM ins UNION ALL SELECT * FROM upd) s
  ${SAVED_LISTENERS.join}
  RETURNING id, ${needsJobSql()} AS pending
)`;
const EVENTS_ROWS = "UNION ALL SELECT 'event', ev.id::text, NULL, NULL FROM ev WHERE ev.pending";
// Prepared (src/db/pool.ts): it took 1.6 ms to plan under load, more than a
// single contact's upsert takes to run; its generic plan probes the (team_id,
// email) index as the custom one does (test/contacts/upsert-plan.test.ts).
// A small batch's input is limited to its size class (src/db/recordset.ts), a
// literal: without it PostgreSQL estimates jsonb_array_elements() at 100 rows
// whatever the batch, and for one contact against a table of a few thousand it
// hashed the input and read the whole contacts table, every team's, in the
// UPDATE and in `pre` (2 ms a single upsert at 2,000 rows, growing with the
// table until the plan flips) instead of probing the index once. A LIMIT only
// ever lowers an estimate, so batches over SIZED_UPSERT_MAX share one text
// without it (estimated at 100, as they always were).
const SIZED_UPSERT_MAX = 96;
const upsertSql = (eventsCte: string, eventsRows: string, limit: number | null) => `${PREPARED}
WITH input AS (
  SELECT $1::uuid AS team_id, p, p->>'email' AS email, ARRAY(SELECT jsonb_array_elements_text(p->'tags')) AS tags
  FROM (SELECT value AS p FROM jsonb_array_elements($2::jsonb)${limit === null ? '' : ` LIMIT ${limit}`}) AS x
),
ins AS (
  INSERT INTO contacts AS k (team_id, email, ${names.join(', ')}, tags,
                             is_email_valid, validation_method, validation_reason, validated_at, status, unsubscribed_at)
  SELECT $1::uuid, i.email, ${CONTACT_FIELDS.map(valueOf).join(', ')}, i.tags,
         true, 'syntax', NULL, now(), COALESCE(sup.status, 'active'), CASE WHEN sup.status = 'unsubscribed' THEN now() END
  FROM input i LEFT JOIN LATERAL (SELECT ${suppressedStatusSql('i.team_id', 'i.email')} AS status) sup ON true
  ON CONFLICT (team_id, email) DO NOTHING
  RETURNING ${SAVED_COLUMNS}
),
upd AS (
  UPDATE contacts k SET
    ${CONTACT_FIELDS.map((f) => `${f.name} = ${keptOrNew(f)}`).join(',\n    ')},
    tags = ${MERGED_TAGS},
    ${MIRRORED_STATUS},
    updated_at = now()
  FROM input i
  WHERE k.team_id = i.team_id AND k.email = i.email
    AND ((${names.map((n) => `k.${n}`).join(', ')}) IS DISTINCT FROM (${CONTACT_FIELDS.map(keptOrNew).join(', ')})
         OR ${ADDED_TAGS} > 0)
    AND NOT (${ADDED_TAGS} > 0 AND cardinality(k.tags) + ${ADDED_TAGS} > $3::int)
  RETURNING ${SAVED_COLUMNS.split(', ').map((c) => `k.${c}`).join(', ')}
),
pre AS (
  SELECT k.email, ${ADDED_TAGS}::int AS added, cardinality(k.tags) AS stored
  FROM contacts k JOIN input i ON k.team_id = i.team_id AND k.email = i.email
)
${eventsCte}
SELECT 'created' AS outcome, ins.email, NULL::int AS added, NULL::int AS stored FROM ins
UNION ALL SELECT 'updated', upd.email, NULL, NULL FROM upd
UNION ALL SELECT 'pre', pre.email, pre.added, pre.stored FROM pre
${eventsRows}`;

export type TagCap = { maxTags: number; firstIndex?: Map<string, number>; field?: TagField };

type UpsertRow = {
  outcome: 'created' | 'updated' | 'pre' | 'event';
  /** The contact's address; for `event` rows, the new event's id. */
  email: string;
  /** `pre` rows: request tags the contact lacks, and the tags it has (statement snapshot). */
  added: number | null;
  stored: number | null;
};

/** The addresses created and updated (each once), and how many were left as they were. */
export type UpsertResult = { created: string[]; updated: string[]; unchanged: number };

// One text per kind and size class up to SIZED_UPSERT_MAX (13 classes) and
// one for larger batches, made once: at most 28 prepared texts.
const upsertTexts = new Map<string, string>();
function upsertText(emitEvents: boolean, n: number): string {
  const limit = n <= SIZED_UPSERT_MAX ? sizeClass(Math.max(1, n)) : null;
  const key = `${emitEvents ? 'e' : 'n'}${limit ?? 'all'}`;
  let text = upsertTexts.get(key);
  if (text === undefined) {
    text = emitEvents ? upsertSql(EVENTS_CTE, EVENTS_ROWS, limit) : upsertSql('', '', limit);
    upsertTexts.set(key, text);
  }
  return text;
}

// PostgreSQL's int: "no cap" as a parameter.
const NO_CAP = 2_147_483_647;

/**
 * The bulk upsert statement for a batch (exported so a test can EXPLAIN the
 * real thing). The text is this batch's: a small batch's input is limited to
 * its size class, so it must not be run with a larger batch's parameters.
 */
export function upsertStatement(
  teamId: string,
  patches: ContactPatch[],
  maxTags = Infinity,
  emitEvents = true,
): { sql: string; params: unknown[] } {
  return { sql: upsertText(emitEvents, patches.length), params: [teamId, JSON.stringify(patches), Math.min(maxTags, NO_CAP)] };
}

async function upsertOnce(tx: Transaction<Database>, teamId: string, patches: ContactPatch[], maxTags: number, emitEvents: boolean) {
  const { sql, params } = upsertStatement(teamId, patches, maxTags, emitEvents);
  const { rows } = await tx.executeQuery<UpsertRow>(CompiledQuery.raw(sql, params));
  const created: string[] = [];
  const updated: string[] = [];
  const events: string[] = [];
  const pre = new Map<string, { added: number; stored: number }>();
  for (const r of rows) {
    if (r.outcome === 'created') created.push(r.email);
    else if (r.outcome === 'updated') updated.push(r.email);
    else if (r.outcome === 'event') events.push(r.email);
    else pre.set(r.email, { added: r.added ?? 0, stored: r.stored ?? 0 });
  }
  return { created, updated, events, pre };
}

/**
 * Upserts a batch (already merged: one patch per address) and emits
 * contact.saved for real changes, unless `emitEvents` is false: a CSV import
 * of 200,000 contacts must not start 200,000 welcome campaigns or webhook calls.
 */
export async function upsertContacts(
  tx: Transaction<Database>,
  teamId: string,
  patches: ContactPatch[],
  cap: TagCap = { maxTags: Infinity },
  opts: { emitEvents?: boolean } = {},
): Promise<UpsertResult> {
  const emitEvents = opts.emitEvents !== false;
  const created: string[] = [];
  const updated: string[] = [];
  const events: string[] = [];
  let unchanged = 0;
  // In address order: the statement inserts and updates in input order, so
  // two batches sharing addresses then lock them in one order and wait for each
  // other instead of deadlocking (opposite orders were a 500 under concurrent
  // bulk upserts; found by the contract fuzz's concurrent bursts).
  let todo = [...patches].sort((x, y) => (x.email < y.email ? -1 : x.email > y.email ? 1 : 0));
  const overCap: { email: string; total: number }[] = [];
  for (let attempt = 1; todo.length > 0; attempt++) {
    const r = await upsertOnce(tx, teamId, todo, cap.maxTags, emitEvents);
    created.push(...r.created);
    updated.push(...r.updated);
    events.push(...r.events);
    // An address inserted by a concurrent transaction after our snapshot was
    // touched by neither branch; a new statement (new snapshot) sees it. So
    // is a row that was to get tags but was not updated although the snapshot
    // had room: a concurrent writer added tags first, and the UPDATE's
    // recheck left it alone; the new statement decides it again.
    const done = new Set([...r.created, ...r.updated]);
    const again = new Set<string>();
    for (const [email, { added, stored }] of r.pre) {
      if (done.has(email)) continue;
      if (added > 0 && stored + added > cap.maxTags) overCap.push({ email, total: stored + added });
      else if (added > 0) again.add(email);
      else unchanged++;
    }
    todo = todo.filter((p) => !done.has(p.email) && (!r.pre.has(p.email) || again.has(p.email)));
    if (todo.length > 0 && attempt >= 3) throw new Error('contact upsert kept racing with concurrent writers');
  }
  if (overCap.length > 0) {
    const field = cap.field ?? bulkTagField;
    const details = overCap
      .map((o) => ({ index: cap.firstIndex?.get(o.email) ?? 0, total: o.total }))
      .sort((a, b) => a.index - b.index)
      .map((o) => ({ field: field(o.index), message: tooManyTags(o.total, cap.maxTags) }));
    // Thrown inside the caller's transaction: nothing of the request is kept.
    throw validationFailed(details, 'too many tags for a contact');
  }
  // The events were written by the statement (EVENTS_CTE); the processing of
  // those a handler wants commits with them, as emit() does it.
  if (events.length > 0) await enqueueEventProcessing(tx, events);
  return { created, updated, unchanged };
}

/** The email.contact.saved payload (docs/api.md, "Webhook payloads") of a contact row. */
export function savedPayload(
  r: Pick<ContactRow, 'id' | 'email' | 'first_name' | 'last_name' | 'phone' | 'foreign_id' | 'country_code' | 'created_at' | 'updated_at'>,
): Record<string, unknown> {
  return {
    contact_id: r.id,
    email: r.email,
    first_name: r.first_name,
    last_name: r.last_name,
    phone: r.phone,
    foreign_id: r.foreign_id,
    country_code: r.country_code,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}

/** savedPayload() in SQL, of the contact row `s` (test/contacts/events.test.ts holds the two equal). */
function savedPayloadSql(s: string): string {
  return `jsonb_build_object('contact_id', ${s}.id, 'email', ${s}.email, 'first_name', ${s}.first_name, 'last_name', ${s}.last_name,
    'phone', ${s}.phone, 'foreign_id', ${s}.foreign_id, 'country_code', ${s}.country_code,
    'created_at', ${isoSql(`${s}.created_at`)}, 'updated_at', ${isoSql(`${s}.updated_at`)})`;
}

type ContactRow = {
  id: string;
  email: string;
  first_name: string | null;
  last_name: string | null;
  phone: string | null;
  foreign_id: string | null;
  country_code: string | null;
  created_at: Date;
  updated_at: Date;
};

/** The team's unsubscribed contacts, newest first; `search` matches part of the (normalised) address. */
export async function listUnsubscribed(db: Db, teamId: string, opts: PageRequest & { search?: string }) {
  let q = db.selectFrom('contacts').where('team_id', '=', teamId).where('status', '=', 'unsubscribed');
  if (opts.search) q = q.where(sql<boolean>`email LIKE ${'%' + escapeLike(opts.search) + '%'}`);
  return paginate(
    opts,
    async () => (await q.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n,
    (limit, offset) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset).execute(),
  );
}

export async function findContactByEmail(db: Db | Transaction<Database>, teamId: string, email: string) {
  return db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('email', '=', email).executeTakeFirst();
}

const UNSUBSCRIBE_SQL = `
WITH input AS (SELECT DISTINCT e AS email FROM unnest($2::text[]) AS e),
ins AS (
  INSERT INTO contacts AS k (team_id, email, status, unsubscribed_at, unsubscribed_reason,
                             is_email_valid, validation_method, validated_at)
  SELECT $1::uuid, i.email, 'unsubscribed', now(), $3, true, 'syntax', now() FROM input i
  ON CONFLICT (team_id, email) DO NOTHING
  RETURNING id, email, unsubscribed_at
),
upd AS (
  UPDATE contacts k SET status = 'unsubscribed', unsubscribed_at = now(), unsubscribed_reason = $3, updated_at = now()
  FROM input i
  WHERE k.team_id = $1::uuid AND k.email = i.email AND k.status <> 'unsubscribed'
  RETURNING k.id, k.email, k.unsubscribed_at
),
pre AS (SELECT k.email FROM contacts k JOIN input i ON k.team_id = $1::uuid AND k.email = i.email)
SELECT 'changed' AS outcome, * FROM ins
UNION ALL SELECT 'changed', * FROM upd
UNION ALL SELECT 'pre', NULL, email, NULL FROM pre`;

/**
 * Unsubscribes addresses (creating suppressed contacts for unknown ones, so a
 * later upsert cannot mail them) and emits contact.unsubscribed for each change.
 */
export async function unsubscribeContacts(
  tx: Transaction<Database>,
  teamId: string,
  emails: string[],
  reason: string | null,
  method: 'api' | 'link' | 'one_click',
): Promise<{ unsubscribed: number; unchanged: number }> {
  const { changed, total } = await markUnsubscribed(tx, teamId, emails, reason);
  // The suppression list every send path reads (marketing only for this reason).
  await suppress(tx, changed.map((r) => ({ team_id: teamId, email: r.email, reason: 'unsubscribed' as const })));
  await emit(
    tx,
    changed.map((r) => ({
      teamId,
      name: 'contact.unsubscribed',
      contactId: r.id,
      payload: {
        contact_id: r.id,
        email: r.email,
        unsubscribed_at: r.unsubscribed_at.toISOString(),
        unsubscribe_reason: reason,
        unsubscribe_method: method,
      },
    })),
  );
  return { unsubscribed: changed.length, unchanged: total - changed.length };
}

/**
 * The one unsubscribe statement, without the event: for a caller that records
 * the contact.unsubscribed event itself (an ingested event is that event).
 * `changed` holds the contacts whose status changed (or were created suppressed).
 */
export async function markUnsubscribed(
  tx: Transaction<Database>,
  teamId: string,
  emails: string[],
  reason: string | null,
): Promise<{ changed: { id: string; email: string; unsubscribed_at: Date }[]; total: number }> {
  type Row = { outcome: 'changed' | 'pre'; id: string; email: string; unsubscribed_at: Date };
  const changed: Row[] = [];
  // In address order, like upsertContacts: concurrent writers lock in one order.
  let todo = [...new Set(emails)].sort();
  const total = todo.length;
  for (let attempt = 1; todo.length > 0; attempt++) {
    const { rows } = await tx.executeQuery<Row>(CompiledQuery.raw(UNSUBSCRIBE_SQL, [teamId, todo, reason]));
    const seen = new Set<string>();
    for (const r of rows) if (r.outcome === 'changed') {
      seen.add(r.email);
      changed.push(r);
    }
    // Found but not changed (already unsubscribed, or deleted by a concurrent
    // erasure whose lock the UPDATE waited for: the statement's snapshot still
    // saw the row). Only those still there are done; an erased one goes round
    // again and is recorded as a new unsubscribed contact.
    const found = rows.filter((r) => r.outcome === 'pre' && !seen.has(r.email)).map((r) => r.email);
    if (found.length > 0) {
      const { rows: still } = await sql<{ email: string }>`
        SELECT email FROM contacts WHERE team_id = ${teamId}::uuid AND email = ANY(${found}::text[])`.execute(tx);
      for (const r of still) seen.add(r.email);
    }
    todo = todo.filter((e) => !seen.has(e));
    if (todo.length > 0 && attempt >= 3) throw new Error('unsubscribe kept racing with concurrent writers');
  }
  return { changed, total };
}
