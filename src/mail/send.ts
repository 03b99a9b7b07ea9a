// The `send_email` task: one email_send_log row, at most one SMTP transaction.
//
// The row is claimed by status (`queued`/`deferred` → `sending`, committed
// before any byte goes to the SMTP server), so a duplicate job, a retried job
// or a second worker finds nothing to claim. A worker that dies between the
// claim and the result leaves the row in `sending`: we cannot know whether the
// server accepted the message, and sending twice is worse than once missing,
// so after SEND_LEASE_SECONDS the row becomes `failed` and is never resent.
import type { Task } from 'graphile-worker';
import { sql } from 'kysely';
import nodemailer, { type Transporter } from 'nodemailer';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { emit, type EventName } from '../events/emit.ts';
import { getMailAccountPassword } from './accounts.ts';
import { renderMessage } from './message.ts';
import { TrackingLinks } from './tracking-links.ts';
import { transportOptions, type MailSecurity } from './transport.ts';

type SendRow = {
  id: string;
  team_id: string;
  campaign_id: string | null;
  campaign_send_id: string | null;
  contact_id: string | null;
  email: string;
  attempts: number;
  open_tracking: boolean;
  click_tracking: boolean;
  status: string;
};

type Account = {
  id: string; host: string; port: number; security: MailSecurity; username: string | null;
  from_email: string; from_name: string | null; updated_at: Date;
};

// Pooled transports per account, rebuilt when the account changes (updated_at),
// so a new password or host takes effect without a restart.
const transports = new Map<string, { version: number; transport: Transporter }>();

async function transportFor(db: Db, appSecret: string, teamId: string, account: Account): Promise<Transporter> {
  const version = account.updated_at.getTime();
  const cached = transports.get(account.id);
  if (cached && cached.version === version) return cached.transport;
  cached?.transport.close();
  const password = await getMailAccountPassword(db, appSecret, teamId, account.id);
  const transport = nodemailer.createTransport({ ...transportOptions(account, password), pool: true, maxConnections: 5 });
  transports.set(account.id, { version, transport });
  return transport;
}

/** Closes every pooled SMTP connection (shutdown, tests). */
export function closeTransports(): void {
  for (const { transport } of transports.values()) transport.close();
  transports.clear();
}

type SmtpError = Error & { responseCode?: number; response?: string; code?: string; command?: string };
export type Outcome =
  | { kind: 'sent'; response: string }
  | { kind: 'temporary' | 'hard' | 'failed'; response: string };

/**
 * 5xx at RCPT TO or after DATA: the recipient (or the message) is refused for
 * good: a hard bounce. 4xx anywhere, or no answer at all (connection, timeout):
 * try again later. Any other 5xx (login, MAIL FROM) is the account's problem,
 * not the recipient's: the send fails without a bounce on the contact.
 */
export function classify(err: SmtpError): Outcome {
  const code = err.responseCode;
  const response = (err.response ?? err.message).slice(0, 1000);
  if (code !== undefined && code >= 400 && code < 500) return { kind: 'temporary', response };
  if (code === undefined) {
    const network = ['ECONNECTION', 'ETIMEDOUT', 'ESOCKET', 'EDNS', 'ECONNREFUSED', 'ECONNRESET'].includes(err.code ?? '');
    return { kind: network ? 'temporary' : 'failed', response };
  }
  const atRecipient = err.code === 'EMESSAGE' || (err.code === 'EENVELOPE' && !/^MAIL FROM/i.test(err.command ?? ''));
  return { kind: atRecipient ? 'hard' : 'failed', response };
}

const iso = (d: Date) => d.toISOString();

export function sendEmailTask(deps: { db: Db; config: Config }): Task {
  const { db, config } = deps;
  const appSecret = config.appSecret;
  if (!appSecret) throw new Error('APP_SECRET is required to send e-mail');
  const links = new TrackingLinks(config.publicUrl, appSecret);

  return async (payload) => {
    const id = (payload as { email_send_log_id?: string }).email_send_log_id;
    if (!id) return;
    const claimed = await sql<SendRow>`
      UPDATE email_send_log SET status = 'sending', attempts = attempts + 1, updated_at = now()
       WHERE id = ${id} AND status IN ('queued', 'deferred')
      RETURNING id, team_id, campaign_id, campaign_send_id, contact_id, email, attempts, open_tracking, click_tracking, status`.execute(db);
    const row = claimed.rows[0];
    if (!row) return reapStale(db, id, config.sendLeaseSeconds);

    const loaded = await loadContext(db, row);
    if (typeof loaded === 'string') return finish(db, row, { status: loaded === 'cancelled' ? 'cancelled' : 'failed', error: loaded });
    const { contact, account, template, sendData, event, campaign } = loaded;
    if (contact.status !== 'active') return finish(db, row, { status: 'cancelled', error: `contact is ${contact.status}` });

    let message;
    try {
      message = await renderMessage({ sendLogId: row.id, contact, template, account, sendData, event, campaign, links });
    } catch (err) {
      return finish(db, row, { status: 'failed', error: `template did not render: ${(err as Error).message}` });
    }
    const messageId = message.messageId.slice(1, -1);
    let outcome: Outcome;
    try {
      const transport = await transportFor(db, appSecret, row.team_id, account);
      const info = await transport.sendMail(message);
      outcome = { kind: 'sent', response: String(info.response ?? '') };
    } catch (err) {
      outcome = classify(err as SmtpError);
    }
    await record(db, config, row, { outcome, messageId, subject: message.subject, accountId: account.id });
  };
}

/** A row still `sending` past the lease belonged to a worker that died mid-send: fail it, never resend. */
async function reapStale(db: Db, id: string, leaseSeconds: number): Promise<void> {
  const { rows } = await sql<{ status: string; stale: boolean }>`
    SELECT status, updated_at < now() - make_interval(secs => ${leaseSeconds}) AS stale FROM email_send_log WHERE id = ${id}`.execute(db);
  const r = rows[0];
  if (!r || r.status !== 'sending') return;
  if (!r.stale) throw new Error(`send ${id} is being sent by another worker or was interrupted; checked again later`);
  await sql`
    UPDATE email_send_log SET status = 'failed', updated_at = now(),
           last_error = 'interrupted during the SMTP transaction; not resent, the message may or may not have been delivered'
     WHERE id = ${id} AND status = 'sending'`.execute(db);
}

async function loadContext(db: Db, row: SendRow) {
  const { rows } = await sql<Record<string, any>>`
    SELECT to_jsonb(k) AS contact,
           CASE WHEN a.id IS NULL THEN NULL ELSE jsonb_build_object(
             'id', a.id, 'host', a.host, 'port', a.port, 'security', a.security, 'username', a.username,
             'from_email', a.from_email, 'from_name', a.from_name, 'updated_at', a.updated_at, 'status', a.status) END AS account,
           CASE WHEN t.id IS NULL THEN NULL ELSE jsonb_build_object(
             'subject', t.subject, 'content', t.content, 'alt_content', t.alt_content) END AS template,
           s.send_data,
           CASE WHEN e.id IS NULL THEN NULL ELSE jsonb_build_object(
             'name', e.name, 'occurred_at', e.occurred_at, 'payload', coalesce(e.input, e.payload)) END AS event,
           CASE WHEN c.id IS NULL THEN NULL ELSE jsonb_build_object('id', c.id, 'name', c.name) END AS campaign
      FROM email_send_log l
      LEFT JOIN contacts k ON k.id = l.contact_id AND k.team_id = l.team_id
      LEFT JOIN mail_accounts a ON a.id = l.mail_account_id AND a.team_id = l.team_id
      LEFT JOIN templates t ON t.id = l.template_id AND t.team_id = l.team_id
      LEFT JOIN campaign_sends s ON s.id = l.campaign_send_id AND s.team_id = l.team_id
      LEFT JOIN events e ON e.id = l.event_id AND e.team_id = l.team_id
      LEFT JOIN campaigns c ON c.id = l.campaign_id AND c.team_id = l.team_id
     WHERE l.id = ${row.id}`.execute(db);
  const r = rows[0];
  if (!r?.contact) return 'cancelled';
  if (!r.account) return 'mail account deleted';
  if (r.account.status !== 'active') return 'cancelled';
  if (!r.template) return 'template deleted';
  return {
    contact: r.contact as Record<string, unknown> & { status: string },
    account: { ...r.account, updated_at: new Date(r.account.updated_at) } as Account,
    template: r.template as { subject: string | null; content: string; alt_content: string },
    sendData: { ...(r.send_data ?? {}), open_tracking: row.open_tracking, click_tracking: row.click_tracking },
    event: r.event as { name: string; occurred_at: string; payload: Record<string, unknown> } | null,
    campaign: r.campaign as { id: string; name: string } | null,
  };
}

/** Ends a send that never reached the SMTP server (nothing to count, no webhook). */
async function finish(db: Db, row: SendRow, r: { status: 'cancelled' | 'failed'; error: string }): Promise<void> {
  await sql`UPDATE email_send_log SET status = ${r.status}, last_error = ${r.error}, updated_at = now() WHERE id = ${row.id}`.execute(db);
}

/** Adds to the campaign send's progress on the locked row (no lost update between two workers). */
function progress(sendId: string, sent: number, bounced: number) {
  const cur = (k: string) => sql`coalesce((send_progress ->> ${k})::bigint, 0)`;
  return sql`
    UPDATE campaign_sends SET updated_at = now(), send_progress = send_progress || jsonb_build_object(
      'total_sent', ${cur('total_sent')} + ${sent}::int,
      'total_bounced', ${cur('total_bounced')} + ${bounced}::int,
      'delivery_rate', CASE WHEN ${cur('total_sent')} + ${cur('total_bounced')} + ${sent + bounced}::int = 0 THEN 0
        ELSE round((${cur('total_sent')} + ${sent}::int)::numeric / (${cur('total_sent')} + ${cur('total_bounced')} + ${sent + bounced}::int), 4) END)
     WHERE id = ${sendId}`;
}

/** Records the SMTP result, its counters, its webhook event and any retry, in one transaction. */
async function record(
  db: Db,
  config: Config,
  row: SendRow,
  r: { outcome: Outcome; messageId: string; subject: string; accountId: string },
): Promise<void> {
  const { outcome } = r;
  const retries = config.sendRetryDelays;
  const kind = outcome.kind === 'temporary' && row.attempts > retries.length ? 'soft' : outcome.kind;
  const base = { email_send_log_id: row.id, contact_id: row.contact_id, email: row.email };
  await db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ at: Date }>`SELECT now() AS at`.execute(tx);
    const at = rows[0].at;
    const status = { sent: 'sent', temporary: 'deferred', soft: 'bounced_soft', hard: 'bounced_hard', failed: 'failed' }[kind];
    await sql`
      UPDATE email_send_log SET status = ${status}, message_id = ${r.messageId}, subject = ${r.subject},
             smtp_response = ${outcome.response}, updated_at = ${at},
             last_error = ${kind === 'sent' ? null : outcome.response},
             sent_at = ${kind === 'sent' ? at : null},
             bounced_at = ${kind === 'soft' || kind === 'hard' ? at : null}
       WHERE id = ${row.id}`.execute(tx);
    let event: { name: EventName; payload: Record<string, unknown> } | null = null;
    if (kind === 'sent') {
      if (row.contact_id) {
        await sql`UPDATE contacts SET sent_count = sent_count + 1, first_sent_at = coalesce(first_sent_at, ${at}), last_sent_at = ${at}
                   WHERE id = ${row.contact_id} AND team_id = ${row.team_id}`.execute(tx);
      }
      if (row.campaign_send_id) await progress(row.campaign_send_id, 1, 0).execute(tx);
      if (row.campaign_id) {
        await sql`UPDATE campaigns SET draft_data = jsonb_set(draft_data, '{last_sent_at}', to_jsonb(${iso(at)}::text))
                   WHERE id = ${row.campaign_id} AND team_id = ${row.team_id}`.execute(tx);
      }
      event = {
        name: 'email.sent',
        payload: {
          ...base, subject: r.subject, sent_at: iso(at), mail_server_id: r.accountId,
          campaign_id: row.campaign_id, campaign_send_id: row.campaign_send_id,
        },
      };
    } else if (kind === 'temporary') {
      const delay = retries[row.attempts - 1] ?? 0;
      await sql`SELECT graphile_worker.add_job('send_email', json_build_object('email_send_log_id', ${row.id}::text),
                  run_at => now() + make_interval(secs => ${delay}), max_attempts => 10)`.execute(tx);
      event = {
        name: 'email.deferred',
        payload: { ...base, deferred_at: iso(at), defer_reason: outcome.response, message_id: r.messageId },
      };
    } else if (kind === 'soft' || kind === 'hard') {
      if (row.contact_id) {
        await sql`
          UPDATE contacts SET first_bounced_at = coalesce(first_bounced_at, ${at}), last_bounced_at = ${at}, updated_at = now(),
                 soft_bounces_count = soft_bounces_count + ${kind === 'soft' ? 1 : 0}::int,
                 hard_bounces_count = hard_bounces_count + ${kind === 'hard' ? 1 : 0}::int,
                 status = CASE WHEN ${kind === 'hard'} AND status = 'active' THEN 'bounced' ELSE status END
           WHERE id = ${row.contact_id} AND team_id = ${row.team_id}`.execute(tx);
      }
      if (row.campaign_send_id) await progress(row.campaign_send_id, 0, 1).execute(tx);
      event = {
        name: kind === 'hard' ? 'email.bounced.hard' : 'email.bounced.soft',
        payload: {
          ...base, bounced_at: iso(at), bounce_reason: outcome.response,
          bounce_category: kind === 'hard' ? 'rejected' : 'deferred_too_long',
          message_id: r.messageId, diagnostic: `smtp; ${outcome.response}`,
        },
      };
    }
    if (event) await emit(tx, [{ teamId: row.team_id, name: event.name, contactId: row.contact_id, payload: event.payload, occurredAt: at }]);
  });
}
