// Writing recipient lists, shared by broadcasts (broadcast.ts) and automation
// sends (automation.ts): from a batch of candidate contacts, the entries (send,
// or skip with the reason), then in the caller's transaction the decisions,
// the `queued` messages with account and template rotation, and their send
// jobs, set-based. The unique (campaign_send_id, contact_id) of list entries
// makes a batch that runs twice (a crash, a duplicate job) list nobody twice:
// a contact already listed gets no decision row back and so no message.
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import type { SkipReason } from '../db/schema-engine.ts';
import { addJobs, JOB_PRIORITY } from '../lib/jobs.ts';
import { SEND_BATCH } from '../mail/send.ts';
import { suppressionsInForce, type SuppressionReason } from '../contacts/suppressions.ts';
import { matchesSegment } from './segment.ts';
import type { SendDataValue } from './schemas.ts';
import { segmentSql } from './segment.ts';
import type { MailDnsResolver } from '../verification/check.ts';
import { prefetchDomains, verifyForSend } from '../verification/send.ts';

type Tx = Transaction<Database>;

/** Contacts read per list batch (one transaction each). */
export const LIST_BATCH = 5000;

export type ContactRow = Record<string, unknown> & { id: string; team_id: string; email: string; status: string };
export type ListEntry = { contact_id: string; email: string; reason: SkipReason | null };
/** What the writer needs of the send (its row, locked by the caller). */
export type ListSend = { id: string; team_id: string; campaign_id: string; send_data: SendDataValue; total_recipients: number };

const SUPPRESSED_SKIP: Record<SuppressionReason, SkipReason> = {
  unsubscribed: 'unsubscribed', bounced_hard: 'bounced', complained: 'complained',
  soft_bounce: 'suppressed', manual: 'suppressed', erased: 'suppressed',
};

/**
 * The entries of a batch of candidates, in their order, until `room` sends:
 * contacts outside the segment are passed over (no entry), contacts that may
 * not be mailed are skips with the reason. `cursor` is the last contact looked
 * at; `capped` says the room ran out before the batch did.
 */
export async function chooseRecipients(
  trx: Tx, contacts: ContactRow[], rules: unknown[], room: number, appSecret: string | undefined,
  verify?: (contacts: ContactRow[]) => Promise<Map<string, SkipReason | null>>,
): Promise<{ entries: ListEntry[]; sends: number; cursor: string | null; capped: boolean }> {
  const matching = contacts.filter((c) => matchesSegment(c, rules as never));
  const suppressed = await suppressionsInForce(trx, matching.map((c) => ({ team_id: c.team_id, email: c.email })), appSecret);
  // Address verification (when the send asks for it) of the contacts that could be sent to.
  const verified = verify
    ? await verify(matching.filter((c) => c.status === 'active' && !suppressed.has(`${c.team_id}|${c.email}`)))
    : new Map<string, SkipReason | null>();
  const entries: ListEntry[] = [];
  let sends = 0;
  let cursor: string | null = null;
  let capped = false;
  for (const c of contacts) {
    if (sends >= room) { capped = true; break; }
    cursor = c.id;
    if (!matchesSegment(c, rules as never)) continue;
    const sup = suppressed.get(`${c.team_id}|${c.email}`);
    let reason: SkipReason | null = null;
    if (c.status === 'unsubscribed' || c.status === 'bounced' || c.status === 'complained') reason = c.status;
    else if (c.status !== 'active') reason = 'suppressed';
    else if (sup) reason = SUPPRESSED_SKIP[sup];
    else reason = verified.get(c.id) ?? null;
    if (reason === null) sends++;
    entries.push({ contact_id: c.id, email: c.email, reason });
  }
  return { entries, sends, cursor, capped };
}

/**
 * Writes the entries of a send: a decision each, a `queued` message per send
 * (account and template by the recipient's position in the send's list), the
 * send jobs at the broadcast priority, and the send's total_recipients.
 * Returns the number of messages written.
 */
export async function writeListEntries(trx: Tx, send: ListSend, entries: ListEntry[]): Promise<number> {
  if (entries.length === 0) return 0;
  const sd = send.send_data;
  const accounts = await activeAccounts(trx, send.team_id, sd.mail_account_ids ?? []);
  const templates = await activeTemplates(trx, send.team_id, sd.template_ids ?? []);
  // With no usable account or template the entry is still recorded, as a skip.
  const resolved = entries.map((e) => ({
    ...e,
    reason: e.reason ?? (accounts.length === 0 ? 'no_mail_account' : templates.length === 0 ? 'no_template' : null),
  }));
  // One statement. Decisions first: a contact already listed (a batch run twice) returns no
  // row and so gets no message. A send's decision carries its message's id, drawn before
  // either row is written, so the decision needs no second write to link them (the
  // foreign key is checked at the end of the statement, when both rows exist). Account and
  // template rotate by the recipient's position in the send's list.
  const base = send.total_recipients;
  const { rows: logs } = await sql<{ id: string }>`
    WITH x AS (
      SELECT r.contact_id, r.email, r.reason, r.ord, CASE WHEN r.reason IS NULL THEN plover_uuid_v7() END AS message_id
        FROM ROWS FROM (jsonb_to_recordset(${JSON.stringify(resolved)}::jsonb) AS (contact_id uuid, email text, reason text))
             WITH ORDINALITY AS r (contact_id, email, reason, ord)
    ), listed AS (
      INSERT INTO campaign_decisions (team_id, event_id, campaign_id, campaign_send_id, contact_id, decision, reason, decided_at, list_entry, email_send_log_id)
      SELECT ${send.team_id}, NULL, ${send.campaign_id}, ${send.id}, x.contact_id,
             CASE WHEN x.reason IS NULL THEN 'send' ELSE 'skip' END, x.reason, now(), true, x.message_id
        FROM x ORDER BY x.ord
      ON CONFLICT (campaign_send_id, contact_id) WHERE list_entry DO NOTHING
      RETURNING email_send_log_id
    ), queued AS (
      SELECT x.*, row_number() OVER (ORDER BY x.ord) - 1 AS pos
        FROM listed JOIN x ON x.message_id = listed.email_send_log_id
    )
    INSERT INTO email_send_log (id, team_id, campaign_id, campaign_send_id, contact_id, template_id, mail_account_id, email,
                                status, open_tracking, click_tracking, queued_at, created_at, updated_at)
    SELECT q.message_id, ${send.team_id}, ${send.campaign_id}, ${send.id}, q.contact_id,
           (${templates}::uuid[])[(${base}::bigint + q.pos) % ${Math.max(1, templates.length)} + 1],
           (${accounts}::uuid[])[(${base}::bigint + q.pos) % ${Math.max(1, accounts.length)} + 1],
           q.email, 'queued', ${sd.open_tracking !== false}, ${sd.click_tracking !== false}, now(), now(), now()
      FROM queued q ORDER BY q.pos
    RETURNING id`.execute(trx);
  if (logs.length === 0) return 0;
  await enqueueSends(trx, logs.map((l) => l.id).sort());
  await sql`UPDATE campaign_sends SET total_recipients = total_recipients + ${logs.length} WHERE id = ${send.id}`.execute(trx);
  return logs.length;
}

async function activeAccounts(trx: Tx, teamId: string, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const { rows } = await sql<{ id: string }>`
    SELECT id FROM mail_accounts WHERE team_id = ${teamId} AND status = 'active' AND id = ANY (${ids}::uuid[])`.execute(trx);
  const ok = new Set(rows.map((r) => r.id));
  return ids.filter((id) => ok.has(id));
}

async function activeTemplates(trx: Tx, teamId: string, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const { rows } = await sql<{ id: string }>`
    SELECT id FROM templates WHERE team_id = ${teamId} AND status = 'active' AND id = ANY (${ids}::uuid[])`.execute(trx);
  const ok = new Set(rows.map((r) => r.id));
  return ids.filter((id) => ok.has(id));
}

/** send_email jobs for queued messages, SEND_BATCH a job, at the broadcast priority. */
export async function enqueueSends(db: Db | Tx, ids: string[]): Promise<void> {
  const jobs = [];
  for (let i = 0; i < ids.length; i += SEND_BATCH) {
    jobs.push({ payload: { email_send_log_ids: ids.slice(i, i + SEND_BATCH) }, priority: JOB_PRIORITY.broadcast });
  }
  await addJobs(db, 'send_email', jobs);
}


type Fragment = ReturnType<typeof sql>;
type PeekSend = { team_id: string; send_data: SendDataValue; list_cursor?: string | null };

/**
 * Before a list batch's transaction: when the send verifies addresses, the
 * DNS verdicts of the next candidates' domains (verification/send.ts). Reads
 * the send and the candidates without locks; the transaction reads them again.
 */
export async function prefetchForBatch(
  db: Db, dns: MailDnsResolver, sendQuery: Fragment,
  candidates: (send: PeekSend, inSegment: Fragment) => ReturnType<typeof sql<{ email: string }>>,
): Promise<void> {
  const { rows } = await (sendQuery as ReturnType<typeof sql<PeekSend>>).execute(db);
  const send = rows[0];
  if (!send?.send_data?.verification_data?.active) return;
  const inSegment = segmentSql((send.send_data.segment_query?.rules ?? []) as never) ?? sql<boolean>`true`;
  const { rows: emails } = await candidates(send, inSegment).execute(db);
  await prefetchDomains(db, dns, emails.map((e) => e.email));
}

/** The verification step of chooseRecipients for a send (none when its verification is off). */
export function verifier(trx: Tx, send: ListSend) {
  const settings = send.send_data.verification_data;
  if (!settings?.active) return undefined;
  return (contacts: ContactRow[]) => verifyForSend(trx, { teamId: send.team_id, sendId: send.id, contacts, settings });
}
