// SQL of the message log API: the references a submit names, idempotency
// keys, the set-based write of a batch with its send_email jobs, and reads of
// the log (one log for transactional and campaign mail).
import { createHash } from 'node:crypto';
import { sql, type Transaction } from 'kysely';
import { idIn } from '../db/ids.ts';
import { PREPARED, type Db } from '../db/pool.ts';
import { recordset } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';
import { SEND_BATCH, TRANSACTIONAL_SEND_PRIORITY } from './send.ts';
import type { EmailStatus } from './emails-schemas.ts';
import { addJobs } from '../lib/jobs.ts';
import { normalizeEmail } from '../lib/text.ts';
import { paginate } from '../lib/paginate.ts';

type Tx = Transaction<Database>;

/** Idempotency keys answer for 24 hours. */
export const IDEMPOTENCY_HOURS = 24;

export type Refs = {
  templates: Map<string, { status: string; subject: string | null }>;
  accounts: Map<string, { status: string }>;
  contactsById: Map<string, { email: string }>;
  contactsByEmail: Map<string, string>;
};

/** Every template, account and contact the items name, of this team only, in at most four statements however many items. */
export async function loadRefs(
  tx: Tx,
  teamId: string,
  items: { template_id: string; mail_account_id: string; contact_id?: string | null; to_email: string }[],
): Promise<Refs> {
  const ids = (f: (i: (typeof items)[number]) => string | null | undefined) => [...new Set(items.map(f).filter((x): x is string => !!x))];
  // Prepared, one value written as a scalar (src/db/ids.ts): a lone submit
  // names one template, account and recipient, and its reads are then planned
  // a few times per connection instead of at every submit. An empty list
  // (no item names a contact) reads nothing.
  const read = async <R>(values: string[], statement: () => Promise<{ rows: R[] }>) => (values.length ? (await statement()).rows : []);
  const [templateIds, accountIds, contactIds, emails] = [
    ids((i) => i.template_id), ids((i) => i.mail_account_id), ids((i) => i.contact_id), ids((i) => normalizeEmail(i.to_email)),
  ];
  const [templates, accounts, byId, byEmail] = await Promise.all([
    read(templateIds, () => sql<{ id: string; status: string; subject: string | null }>`${sql.raw(PREPARED)}
      SELECT id, status, subject FROM templates WHERE team_id = ${teamId}::uuid AND ${idIn('id', templateIds)}`.execute(tx)),
    read(accountIds, () => sql<{ id: string; status: string }>`${sql.raw(PREPARED)}
      SELECT id, status FROM mail_accounts WHERE team_id = ${teamId}::uuid AND ${idIn('id', accountIds)}`.execute(tx)),
    read(contactIds, () => sql<{ id: string; email: string }>`${sql.raw(PREPARED)}
      SELECT id, email FROM contacts WHERE team_id = ${teamId}::uuid AND ${idIn('id', contactIds)}`.execute(tx)),
    read(emails, () => sql<{ id: string; email: string }>`${sql.raw(PREPARED)}
      SELECT id, email FROM contacts WHERE team_id = ${teamId}::uuid AND ${idIn('email', emails, 'text')}`.execute(tx)),
  ]);
  return {
    templates: new Map(templates.map((r) => [r.id, r])),
    accounts: new Map(accounts.map((r) => [r.id, r])),
    contactsById: new Map(byId.map((r) => [r.id, r])),
    contactsByEmail: new Map(byEmail.map((r) => [r.email, r.id])),
  };
}

/** JSON with object keys sorted: two bodies that mean the same hash the same. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

export function requestHash(scope: string, body: unknown): string {
  return createHash('sha256').update(`${scope}\n${canonical(body)}`).digest('hex');
}

export type StoredAnswer = { request_hash: string; response: any };

/**
 * Locks the keys (two requests with one key wait for each other, so only one
 * sends) and returns the answers stored for them in the last 24 hours.
 */
export async function lockIdempotencyKeys(tx: Tx, teamId: string, keys: string[]): Promise<Map<string, StoredAnswer>> {
  if (keys.length === 0) return new Map();
  const sorted = [...new Set(keys)].sort();
  await sql`SELECT count(pg_advisory_xact_lock(hashtextextended(${teamId} || ':' || k, 13))) FROM unnest(${sorted}::text[]) AS k`.execute(tx);
  const { rows } = await sql<StoredAnswer & { key: string }>`
    SELECT key, request_hash, response FROM email_idempotency
     WHERE team_id = ${teamId} AND key = ANY (${sorted}::text[])
       AND created_at > now() - make_interval(hours => ${IDEMPOTENCY_HOURS})`.execute(tx);
  return new Map(rows.map((r) => [r.key, { request_hash: r.request_hash, response: r.response }]));
}

/** Stores 2xx answers under their keys (an expired row of the same key is replaced). */
export async function storeIdempotentAnswers(
  tx: Tx,
  teamId: string,
  answers: { key: string; request_hash: string; response: unknown }[],
): Promise<void> {
  if (answers.length === 0) return;
  await sql`
    INSERT INTO email_idempotency (team_id, key, request_hash, response)
    SELECT ${teamId}, x.key, x.request_hash, x.response
      FROM jsonb_to_recordset(${JSON.stringify(answers)}::jsonb) AS x (key text, request_hash text, response jsonb)
    ON CONFLICT (team_id, key) DO UPDATE
       SET request_hash = EXCLUDED.request_hash, response = EXCLUDED.response, created_at = now()`.execute(tx);
}

export type NewEmail = {
  template_id: string;
  mail_account_id: string;
  contact_id: string | null;
  email: string;
  to_name: string | null;
  subject: string | null;
  status: 'queued' | 'suppressed';
  open_tracking: boolean;
  click_tracking: boolean;
  render: Record<string, unknown>;
};

export type InsertedEmail = { id: string; created_at: Date };

/**
 * Writes every e-mail in one statement (ids in input order) and enqueues the
 * send_email jobs of the queued ones, SEND_BATCH per job, at the
 * transactional priority, in the caller's transaction.
 */
export async function insertEmails(tx: Tx, teamId: string, emails: NewEmail[]): Promise<InsertedEmail[]> {
  if (emails.length === 0) return [];
  // Prepared, the batch a sized recordset (src/db/recordset.ts): planned a few
  // times per connection and size class, not at every submit.
  const { rows } = await sql<{ id: string; created_at: Date; status: string }>`${sql.raw(PREPARED)}
    WITH x AS MATERIALIZED (
      SELECT plover_uuid_v7() AS id, x.*
        FROM ${recordset(JSON.stringify(emails.map((e, ord) => ({ ...e, ord }))), emails.length, `x (
          template_id uuid, mail_account_id uuid, contact_id uuid, email text, to_name text, subject text, status text,
          open_tracking boolean, click_tracking boolean, render jsonb, ord bigint)`)} AS x
    ), ins AS (
      INSERT INTO email_send_log (id, team_id, source, template_id, mail_account_id, contact_id, email, to_name, subject,
                                  status, open_tracking, click_tracking, render, last_error)
      SELECT id, ${teamId}, 'transactional', template_id, mail_account_id, contact_id, email, to_name, subject,
             status, open_tracking, click_tracking, render,
             CASE WHEN status = 'suppressed' THEN 'address suppressed at submit' END
        FROM x
      RETURNING id
    )
    SELECT x.id, now() AS created_at, x.status FROM x ORDER BY x.ord`.execute(tx);
  const queued = rows.filter((r) => r.status === 'queued').map((r) => r.id);
  const jobs = [];
  for (let i = 0; i < queued.length; i += SEND_BATCH) {
    jobs.push({ payload: { email_send_log_ids: queued.slice(i, i + SEND_BATCH) }, priority: TRANSACTIONAL_SEND_PRIORITY });
  }
  await addJobs(tx, 'send_email', jobs);
  return rows.map((r) => ({ id: r.id, created_at: r.created_at }));
}

export type LogRow = {
  id: string; source: 'campaign' | 'transactional'; status: string; email: string; to_name: string | null;
  template_id: string | null; mail_account_id: string | null; contact_id: string | null; campaign_id: string | null;
  campaign_send_id: string | null; subject: string | null; message_id: string | null; attempts: number;
  created_at: Date; updated_at: Date; sent_at: Date | null; bounced_at: Date | null; smtp_response: string | null;
  last_error: string | null; claimed_at: Date | null;
};

const LOG_COLUMNS = sql`id, source, status, email, to_name, template_id, mail_account_id, contact_id, campaign_id, campaign_send_id,
  subject, message_id, attempts, created_at, updated_at, sent_at, bounced_at, smtp_response, last_error, claimed_at`;

/** Public status of a log row: `sending` is still `queued`; the bounce kind is the timeline's detail. */
export function publicStatus(status: string): EmailStatus {
  if (status === 'sending') return 'queued';
  if (status === 'bounced_soft' || status === 'bounced_hard') return 'bounced';
  return status as EmailStatus;
}

const INTERNAL_STATUSES: Record<EmailStatus, string[]> = {
  queued: ['queued', 'sending'], sent: ['sent'], delivered: ['delivered'], deferred: ['deferred'],
  bounced: ['bounced_soft', 'bounced_hard'], failed: ['failed'], suppressed: ['suppressed'], cancelled: ['cancelled'],
};

export async function findEmail(db: Db, teamId: string, id: string): Promise<LogRow | undefined> {
  const { rows } = await sql<LogRow>`SELECT ${LOG_COLUMNS} FROM email_send_log WHERE team_id = ${teamId} AND id = ${id}`.execute(db);
  return rows[0];
}

// A message's stored hits are capped (tracking), and the timeline shows the first ones.
const TIMELINE_HITS = 200;

export async function trackingHits(db: Db, teamId: string, id: string) {
  const { rows } = await sql<{ kind: string; created_at: Date; is_bot: boolean; url: string | null; reasons: string[] }>`
    SELECT kind, created_at, is_bot, url, reasons FROM tracking_hits
     WHERE team_id = ${teamId} AND email_send_log_id = ${id} AND kind IN ('open', 'click')
     ORDER BY created_at, id LIMIT ${TIMELINE_HITS}`.execute(db);
  return rows;
}

export async function listEmails(
  db: Db,
  teamId: string,
  f: { page: number; perPage: number; status?: EmailStatus; source?: string; to_email?: string },
  /** Count at most this many matching messages (the total is then at most countCap + 1): a page that shows "N+" need not count a million. */
  countCap?: number,
): Promise<{ rows: LogRow[]; total: number }> {
  const where = [sql`team_id = ${teamId}`];
  if (f.source) where.push(sql`source = ${f.source}`);
  if (f.status) where.push(sql`status = ANY (${INTERNAL_STATUSES[f.status]}::text[])`);
  if (f.to_email) where.push(sql`email = ${normalizeEmail(f.to_email)}`);
  const cond = sql.join(where, sql` AND `);
  return paginate(
    f,
    async () =>
      countCap === undefined
        ? (await sql<{ n: string }>`SELECT count(*) AS n FROM email_send_log WHERE ${cond}`.execute(db)).rows[0]!.n
        : (await sql<{ n: string }>`SELECT count(*) AS n FROM (SELECT 1 FROM email_send_log WHERE ${cond} LIMIT ${countCap + 1}) m`.execute(db)).rows[0]!.n,
    async (limit, offset) =>
      (await sql<LogRow>`
        SELECT ${LOG_COLUMNS} FROM email_send_log WHERE ${cond}
         ORDER BY created_at DESC, id DESC LIMIT ${limit} OFFSET ${offset}`.execute(db)).rows,
  );
}
