// CSV import of contacts, shared by `plover contacts import` and the
// dashboard's import job. The file is streamed (csv-records.ts), each row checked
// with the API's own schema and normalisation, and the good rows written in
// batches of 1,000 through the bulk upsert the API uses, one transaction per
// batch. A bad row goes to the rejects file with its line number and reason;
// a batch never lands half-written.
import { createWriteStream, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import type { Readable } from 'node:stream';
import { stringify, type Stringifier } from 'csv-stringify';
import type { Db } from '../db/pool.ts';
import { AppError } from '../lib/errors.ts';
import { compileBodyValidator } from '../http/schemas.ts';
import { CONTACT_FIELDS, type FieldKind } from './fields.ts';
import { normaliseContacts, upsertContacts } from './queries.ts';
import { csvRecords } from './csv-records.ts';
import { ContactInput, type ContactInputT } from './schemas.ts';
import { normalizeEmail } from '../lib/text.ts';

export const IMPORT_BATCH = 1000;
/** Batches written at once; the caller's pool should have a connection for each. */
export const IMPORT_IN_FLIGHT = 4;

/** A problem with the file as a whole (no e-mail column, a bad --map): nothing is imported. */
export class ImportSetupError extends Error {}

const KINDS = new Map<string, FieldKind>([['email', 'text'], ...CONTACT_FIELDS.map((f) => [f.name, f.kind] as [string, FieldKind])]);
const IGNORE = '-';

type Column = { index: number; field: string; kind: FieldKind | 'tags' };

export type ImportOptions = {
  db: Db;
  teamId: string;
  input: Readable;
  /** header (any case) → contact field, `tags`, or `-` to ignore the column. */
  map?: Record<string, string>;
  /** Added to every imported contact. */
  tags?: string[];
  tagSeparator?: string;
  dryRun?: boolean;
  emitEvents?: boolean;
  maxTags: number;
  rejects: RejectsSink;
  onProgress?: (p: ImportProgress) => void;
  batchSize?: number;
};

export type ImportProgress = { rows: number; rejected: number; bytes: number };

export type ImportSummary = {
  rows: number;
  imported: number;
  created: number;
  updated: number;
  unchanged: number;
  rejected: number;
  ignored_columns: string[];
  dry_run: boolean;
  events_emitted: boolean;
};

/** Headers match field names in any case, with spaces or dashes for underscores ("First Name"). */
const headerKey = (h: string) => h.trim().toLowerCase().replace(/[\s-]+/g, '_');

export function mapColumns(header: string[], map: Record<string, string> = {}): { columns: Column[]; ignored: string[] } {
  const overrides = new Map<string, string>();
  for (const [h, field] of Object.entries(map)) {
    const f = field.trim().toLowerCase();
    if (f !== IGNORE && f !== 'tags' && !KINDS.has(f)) throw new ImportSetupError(`--map ${h}=${field}: no contact field named "${field}"`);
    overrides.set(headerKey(h), f);
  }
  const columns: Column[] = [];
  const ignored: string[] = [];
  const taken = new Map<string, string>();
  header.forEach((h, index) => {
    const field = overrides.get(headerKey(h)) ?? headerKey(h);
    if (field === IGNORE) return;
    if (field !== 'tags' && !KINDS.has(field)) {
      ignored.push(h);
      return;
    }
    const other = taken.get(field);
    if (other !== undefined) throw new ImportSetupError(`columns "${other}" and "${h}" both map to ${field}; ignore one with --map "${h}=-"`);
    taken.set(field, h);
    columns.push({ index, field, kind: field === 'tags' ? 'tags' : KINDS.get(field)! });
  });
  if (!taken.has('email')) throw new ImportSetupError('no e-mail column: name one "email" or map it with --map "<header>=email"');
  return { columns, ignored };
}

const INTEGER_RE = /^[+-]?\d+$/;
const DECIMAL_RE = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const BOOLEANS: Record<string, boolean> = { true: true, false: false, yes: true, no: false, '1': true, '0': false };
const validate = compileBodyValidator(ContactInput);

/**
 * One row as the API's contact input, or why not. An empty cell leaves the
 * field as it is (as an absent JSON key does); CSV has no way to say null.
 */
export function rowToContact(record: string[], columns: Column[], tagSeparator: string): { contact: ContactInputT } | { reason: string } {
  const c: Record<string, unknown> = {};
  const problems: string[] = [];
  for (const col of columns) {
    const raw = record[col.index] ?? '';
    const v = col.kind === 'text' ? raw : raw.trim();
    if (v.trim() === '') continue;
    switch (col.kind) {
      case 'tags':
        c.tags = v.split(tagSeparator).map((t) => t.trim()).filter((t) => t !== '');
        break;
      case 'bigint':
        if (INTEGER_RE.test(v)) c[col.field] = Number(v);
        else problems.push(`${col.field} must be an integer, got "${v.slice(0, 40)}"`);
        break;
      case 'numeric':
        if (DECIMAL_RE.test(v)) c[col.field] = Number(v);
        else problems.push(`${col.field} must be a number, got "${v.slice(0, 40)}"`);
        break;
      case 'boolean':
        if (Object.hasOwn(BOOLEANS, v.toLowerCase())) c[col.field] = BOOLEANS[v.toLowerCase()];
        else problems.push(`${col.field} must be true or false, got "${v.slice(0, 40)}"`);
        break;
      default:
        c[col.field] = v;
    }
  }
  if (problems.length === 0 && !validate(c)) {
    for (const e of validate.errors ?? []) {
      const field = e.instancePath.replace(/^\//, '').replace(/\//g, '.') || 'row';
      problems.push(`${field} ${e.message ?? 'is invalid'}`);
    }
  }
  if (typeof c.email !== 'string' && problems.length === 0) problems.push('email is required');
  return problems.length ? { reason: problems.join('; ') } : { contact: c as ContactInputT };
}

/** Where refused rows go: line, reason, then the row as it was. Created on the first reject. */
export class RejectsSink {
  count = 0;
  private out: Stringifier | null = null;
  private file: WriteStream | null = null;
  readonly path: string;
  private header: string[] = [];
  constructor(path: string) {
    this.path = path;
  }
  setHeader(header: string[]) {
    this.header = header;
  }
  async add(line: number, reason: string, record: string[] = []): Promise<void> {
    this.count++;
    if (!this.out) {
      this.file = createWriteStream(this.path);
      this.out = stringify();
      this.out.pipe(this.file);
      this.out.write(['line', 'reason', ...this.header]);
    }
    if (!this.out.write([String(line), reason, ...record])) await once(this.out, 'drain');
  }
  async close(): Promise<void> {
    if (!this.out || !this.file) return;
    const done = once(this.file, 'close');
    this.out.end();
    await done;
  }
}

type Row = { line: number; record: string[]; contact: ContactInputT };

export async function importContacts(o: ImportOptions): Promise<ImportSummary> {
  const batchSize = o.batchSize ?? IMPORT_BATCH;
  const tagSeparator = o.tagSeparator ?? ';';
  const summary: ImportSummary = {
    rows: 0, imported: 0, created: 0, updated: 0, unchanged: 0, rejected: 0, ignored_columns: [],
    dry_run: !!o.dryRun, events_emitted: !!o.emitEvents && !o.dryRun,
  };
  let bytes = 0;
  // Counted on the way through: a 'data' listener beside the reader would put
  // the stream in flowing mode and read the whole file into memory.
  async function* counted(input: Readable) {
    for await (const chunk of input) {
      bytes += (chunk as Buffer).length;
      yield chunk as Buffer;
    }
  }
  const flush = async (rows: Row[]) => {
    let todo = rows;
    // A row whose tags pass the cap (its own, or with the stored ones) is
    // refused with its line and the batch tried again without it.
    while (todo.length > 0) {
      try {
        const field = (i: number) => String(i);
        const { patches, firstIndex } = normaliseContacts(todo.map((r) => r.contact), o.tags ?? [], { maxTags: o.maxTags, field });
        if (o.dryRun) {
          summary.imported += todo.length;
          return;
        }
        const r = await o.db.transaction().execute((tx) =>
          upsertContacts(tx, o.teamId, patches, { maxTags: o.maxTags, firstIndex, field }, { emitEvents: !!o.emitEvents }),
        );
        summary.imported += todo.length;
        summary.created += r.created.length;
        summary.updated += r.updated.length;
        summary.unchanged += r.unchanged;
        return;
      } catch (err) {
        if (!(err instanceof AppError) || !err.details?.length) throw err;
        const bad = new Set(err.details.map((d) => Number(d.field)));
        for (const d of err.details) await o.rejects.add(todo[Number(d.field)].line, `tags: ${d.message}`, todo[Number(d.field)].record);
        todo = todo.filter((_, i) => !bad.has(i));
      }
    }
  };

  let columns: Column[] | null = null;
  let width = 0;
  let batch: Row[] = [];
  // Up to four batches are written at once (one connection each) while the
  // next is parsed: on 2 shared cores a 60,000-row import took 15.8 s with one
  // batch at a time, 10.4 s with two; 100,000 rows 23.5 s with two, 11.2 s
  // with four (npm run bench -- csv-import --rows 100000). A batch
  // that shares an address with one in flight waits for it, so a later row
  // still wins over an earlier one, as in one API call.
  let inflight: { emails: Set<string>; done: Promise<void> }[] = [];
  const start = async (rows: Row[]) => {
    const emails = new Set(rows.map((r) => normalizeEmail(r.contact.email)));
    const clash = inflight.some((f) => [...emails].some((e) => f.emails.has(e)));
    const wait = clash ? inflight : inflight.length >= IMPORT_IN_FLIGHT ? inflight.slice(0, inflight.length - IMPORT_IN_FLIGHT + 1) : [];
    for (const f of wait) await f.done;
    inflight = inflight.filter((f) => !wait.includes(f));
    const done = flush(rows);
    done.catch(() => {}); // awaited later; this only stops an early rejection counting as unhandled
    inflight.push({ emails, done });
  };
  const report = () => o.onProgress?.({ rows: summary.rows, rejected: o.rejects.count, bytes });
  for await (const item of csvRecords(counted(o.input))) {
    if (columns) summary.rows++;
    if ('error' in item) {
      // Unreadable before the header is read: the header itself is unreadable.
      if (!columns) throw new ImportSetupError(`line ${item.line}: the header row is ${item.error}`);
      await o.rejects.add(item.line, item.error);
      continue;
    }
    const { record, line } = item;
    if (!columns) {
      const mapped = mapColumns(record, o.map);
      columns = mapped.columns;
      summary.ignored_columns = mapped.ignored;
      width = record.length;
      o.rejects.setHeader(record);
      continue;
    }
    if (record.length !== width) {
      await o.rejects.add(line, `expected ${width} columns, got ${record.length}`, record);
      continue;
    }
    const r = rowToContact(record, columns, tagSeparator);
    if ('reason' in r) {
      await o.rejects.add(line, r.reason, record);
      continue;
    }
    batch.push({ line, record, contact: r.contact });
    if (batch.length >= batchSize) {
      await start(batch);
      batch = [];
      report();
    }
  }
  if (!columns) throw new ImportSetupError('the file is empty: expected a header row');
  if (batch.length) await start(batch);
  for (const f of inflight) await f.done;
  await o.rejects.close();
  summary.rejected = o.rejects.count;
  report();
  return summary;
}
