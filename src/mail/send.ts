// The `send_email` task: a batch of email_send_log rows (up to SEND_BATCH, as
// the engine enqueues them; retries carry one), at most one SMTP transaction
// each.
//
// Each row is claimed by status (`queued`/`deferred` → `sending`, committed
// before any byte of the message goes to the SMTP server, and only when a
// pooled connection is free for it), so a duplicate job, a retried job or a
// second worker finds nothing to claim. A worker that dies between the
// claim and the result leaves the rows in `sending`: we cannot know whether the
// server accepted a message, and sending twice is worse than once missing, so
// after SEND_LEASE_SECONDS such a row becomes `failed` and is never resent.
//
// Why batches: one job per e-mail cost about 20 statements and 3 commits per
// message (claim, context, result transaction, graphile-worker's own), which
// held bench/campaigns.ts to a tenth of what nodemailer alone sends. A batch
// claims, loads and records with a fixed number of statements; its messages go
// out concurrently over the account's pooled transport.
import type { Task } from 'graphile-worker';
import { completeSendsOfMessages } from '../campaigns/finish.ts';
import { sql } from 'kysely';
import nodemailer, { type Transporter } from 'nodemailer';
import type { Config } from '../config.ts';
import { PREPARED, type Db } from '../db/pool.ts';
import { isoSqlAnyYear } from '../db/iso.ts';
import { recordset } from '../db/recordset.ts';
import { parseAllowList, type AllowList } from '../lib/net-guard.ts';
import { getMailAccountPassword } from './accounts.ts';
import { Allowance, claimManyForSmtp, dailyCap, takeMinuteSlot, wakeNextDay, wakeNextMinute, type ClaimItem } from './daily-usage.ts';
import { Batcher } from '../lib/batcher.ts';
import { renderMessage, type SendableMessage } from './message.ts';
import { replyAddress, returnPathAddress } from '../inbound/address.ts';
import { RenderFailure } from '../templates/pool-run.ts';
import { recordResults, type Outcome, type SendResult } from './send-record.ts';
import { ALL_MAIL_REASONS, emailHmac, SUPPRESSION_REASONS, type SuppressionReason } from '../contacts/suppressions.ts';
import { transportOptions, type MailSecurity } from './transport.ts';
import { loadSigningKeys, signaturesFor, type ActiveKey } from './dkim.ts';
import { DKIM_OPTION, installDkimSigner, type DkimOption } from './dkim-sign.ts';
import { HOLD_OPTION, installWholeMessage } from './whole-message.ts';
import { RenderAhead, type Ticket } from './render-ahead.ts';
import type { MimePart } from '../templates/mime-part.ts';
import type { RenderLimits } from '../lib/render-limits.ts';
import { idIn } from '../db/ids.ts';

/** Sends whose messages wait while the send is paused: broadcasts and automation sends (their lists are written ahead). */
const listedSend = (type: string | null | undefined) => type === 'broadcast' || type === 'automation';

export { SEND_PRIORITY, TRANSACTIONAL_SEND_PRIORITY, type Outcome } from './send-record.ts';
export { dailyCap } from './daily-usage.ts';

/** Sends per send_email job enqueued by the engine: a batch's messages are in flight together. */
export const SEND_BATCH = 50;
/** Pooled SMTP connections per mail account and worker process. */
const SMTP_CONNECTIONS = 5;
/**
 * Ordinary mail: a message is first rendered with its output and HTML cut to
 * this many characters, and all of a job's messages are rendered at once, as
 * they wait for the account's connections (render-ahead.ts). Newsletters are
 * well under it (Gmail clips at 102 KiB).
 */
const SMALL_MESSAGE_CHARS = 256 * 1024;
const partChars = (p: MimePart) => (typeof p === 'string' ? p.length : p.raw.length);

/** The limits of a first render: the output and HTML caps cut to `chars`, the same object when they are under it already. */
function smallRender(limits: RenderLimits, chars: number): RenderLimits {
  if (limits.maxOutputChars <= chars && limits.maxHtmlChars <= chars) return limits;
  return { ...limits, maxOutputChars: Math.min(limits.maxOutputChars, chars), maxHtmlChars: Math.min(limits.maxHtmlChars, chars) };
}

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
  source: 'campaign' | 'transactional';
};

type Account = {
  id: string; host: string; port: number; security: MailSecurity; username: string | null;
  from_email: string; from_name: string | null; updated_at: Date; daily_limit: number; campaign_share_percent: number;
  /** Messages per minute handed to SMTP; null: no limit. */
  max_per_minute?: number | null;
  /** Signed per-message return path; signed Reply-To (inbound/address.ts). */
  verp?: boolean; capture_replies?: boolean;
  /** Its active DKIM keys (src/mail/dkim.ts): one signature each. */
  dkim: ActiveKey[];
};

// Pooled transports per account, rebuilt when the account changes (updated_at),
// so a new password or host takes effect without a restart. The promise is
// cached, so the concurrent sends of a batch share one pool, not one each.
// Every connection of a pool goes through the address guard of `allow`.
// A connection carries `perConnection` messages (SMTP_MESSAGES_PER_CONNECTION),
// then the pool opens a new one: relays cap messages per connection (some at 25
// or 50), and a message past the cap gets a temporary refusal, so a deferral.
const transports = new Map<string, { version: number; allow: AllowList; perConnection: number; transport: Promise<Transporter> }>();

/** Where a pool's password comes from (the account's team) and how its connections are made. */
type PoolSettings = { db: Db; appSecret: string; teamId: string; allow: AllowList; perConnection: number };

function transportFor(account: Account, { db, appSecret, teamId, allow, perConnection }: PoolSettings): Promise<Transporter> {
  const version = account.updated_at.getTime();
  const cached = transports.get(account.id);
  if (cached && cached.version === version && cached.allow === allow && cached.perConnection === perConnection) return cached.transport;
  cached?.transport.then((t) => t.close(), () => {});
  const transport = getMailAccountPassword(db, appSecret, teamId, account.id).then((password) => {
    // No textEncoding, encoding, newline or attachDataUrls defaults here: the parts
    // pre-encoded in the render pool are nodemailer's own bytes only without them
    // (templates/mime-part.ts, test/mail/mime-part.test.ts).
    const t = nodemailer.createTransport({
      ...transportOptions(account, password, allow), pool: true, maxConnections: SMTP_CONNECTIONS, maxMessages: perConnection,
    });
    installDkimSigner(t);
    installWholeMessage(t);
    return t;
  });
  transports.set(account.id, { version, allow, perConnection, transport });
  transport.catch(() => transports.get(account.id)?.transport === transport && transports.delete(account.id));
  return transport;
}

/**
 * Closes this process's pooled connection to an account (after an update or a
 * delete). Other processes rebuild theirs at the next send, since the update
 * changed the account's `updated_at`.
 */
export function forgetTransport(accountId: string): void {
  const cached = transports.get(accountId);
  if (!cached) return;
  transports.delete(accountId);
  cached.transport.then((t) => t.close(), () => {});
}

/** Closes every pooled SMTP connection (shutdown, tests). */
export function closeTransports(): void {
  for (const { transport } of transports.values()) transport.then((t) => t.close(), () => {});
  transports.clear();
}

type SmtpError = Error & { responseCode?: number; response?: string; code?: string; command?: string };

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

export function sendEmailTask(deps: { db: Db; config: Config }): Task<'send_email'> {
  const { db, config } = deps;
  const appSecret = config.appSecret;
  if (!appSecret) throw new Error('APP_SECRET is required to send e-mail');
  // Rebuilt in the pool's threads (render-tasks.ts), which derive the tracking key from the secret.
  const links = { publicUrl: config.publicUrl, appSecret };
  const smallLimits = smallRender(config.render, SMALL_MESSAGE_CHARS);
  const allow = parseAllowList(config.allowedPrivateTargets);

  // Claims are group-committed per account and cap: the sends of this process
  // that wait for a claim at the same moment (each holding one of the account's
  // SMTP connections, so a kill still leaves only what was in flight) share one
  // statement and one commit (daily-usage.ts, claimManyForSmtp).
  const claims = new Map<string, Batcher<ClaimItem, { attempts: number } | undefined>>();
  const claim = (accountId: string, teamId: string, cap: number, item: ClaimItem) => {
    const key = `${accountId}:${teamId}:${cap}`;
    let b = claims.get(key);
    if (!b) claims.set(key, (b = new Batcher((items) => claimManyForSmtp(db, accountId, teamId, cap, items), { max: 50 })));
    return b.add(item);
  };

  /**
   * One row: rendered, then claimed (`queued`/`deferred` →
   * `sending`, group-committed) only when an SMTP connection of its account is
   * free, then sent (with a slot of today, the envelope goes out while the claim
   * commits; the message's bytes wait for it).
   * Claiming the whole batch up front left up to a batch of messages in
   * `sending` that were still queued in the pool when a worker was killed, and
   * those are failed, never sent (test/faults/worker.test.ts); claimed one at a
   * time, a kill leaves only what was really in flight.
   */
  async function sendOne(
    row: SendRow, loaded: Context | string | undefined, rec: Recorder, allowance: Allowance, waiting: SendRow[], signing: Signing,
    nextMinute: SendRow[], job: SendJob, held: { ticket?: Ticket },
  ): Promise<'claimed' | 'unclaimed'> {
    // A paused broadcast holds its messages back, `queued`: start enqueues them again.
    if (loaded === 'paused') return 'unclaimed';
    const stop = whyNot(loaded);
    if (stop) return rec.finish({ id: row.id, ...stop });
    const { contact, account, template, sendData, event, campaign, transactional } = loaded as Context;
    let message;
    try {
      // The unsubscribe link names the recipient (contact, or the address for
      // mail to a non-contact), so it outlives this row (retention).
      const recipient = { teamId: row.team_id, contactId: row.contact_id, email: row.email };
      const input = {
        sendLogId: row.id, contact: contact ?? {}, template, account, sendData, event, campaign, links, recipient,
        ...(transactional ? {
          variables: transactional.variables, toEmail: row.email, toName: transactional.to_name,
          replyTo: transactional.reply_to, listUnsubscribe: transactional.list_unsubscribe, hasContact: contact !== null,
        } : {}),
      };
      const render = (limits: RenderLimits) => renderMessage(input, { limits, team: row.team_id, mime: true });
      try {
        message = await render(smallLimits);
      } catch (err) {
        if (!(err instanceof RenderFailure && err.size && smallLimits !== config.render)) throw err;
        // Larger than ordinary mail: rendered again with the full caps once its
        // job has no other large message in flight and the process has room to
        // hold it (render-ahead.ts); the caps' own failures come from this render.
        held.ticket = await job.large.enter();
        message = await render(config.render);
        held.ticket.hold(partChars(message.html) + partChars(message.text));
      }
    } catch (err) {
      // The template's fault (a cap, its budget, a Liquid error): this message
      // fails, the batch and the campaign go on. Anything else (a full pool)
      // rejects the job, which graphile-worker retries; the row stays queued.
      if (!(err instanceof RenderFailure)) throw err;
      return rec.finish({ id: row.id, status: 'failed', error: `template did not render: ${err.message}` });
    }
    withInboundAddresses(message, account, row, appSecret!, config.inbound.domain);
    const release = await slot(account.id);
    try {
      // The account's messages per minute: over it, the message waits, `queued`, for the next minute.
      if (account.max_per_minute && !(await takeMinuteSlot(db, account.id, account.max_per_minute))) {
        nextMinute.push(row);
        return 'unclaimed';
      }
      // The daily limit is counted at claim time: against the job's reserved
      // slots (daily-usage.ts), or by the claim itself when the job has none left.
      const slotDay = allowance.take(account.id, row.source);
      const claiming = claim(account.id, row.team_id, dailyCap(account, row.source), { id: row.id, slotDay });
      const smtp = async (hold?: Promise<void>): Promise<Outcome> => {
        try {
          const transport = await transportFor(account, {
            db, appSecret: appSecret!, teamId: row.team_id, allow, perConnection: config.smtpMessagesPerConnection,
          });
          const dkim: DkimOption = { signatures: signaturesFor(account.dkim, signing.keys, account.from_email), onErrors: signing.onErrors };
          const info = await transport.sendMail({ ...message, [DKIM_OPTION]: dkim, [HOLD_OPTION]: hold } as typeof message);
          return { kind: 'sent', response: String(info.response ?? '') };
        } catch (err) {
          return classify(err as SmtpError);
        }
      };
      let claimed: { attempts: number } | undefined;
      // Set whenever the message is claimed: after SMTP, in either order below.
      let outcome: Outcome | undefined;
      if (slotDay === utcDay() && job.hold) {
        // With a slot of today the claim fails only if the message was taken or
        // cancelled meanwhile (or the statement failed): its SMTP envelope (MAIL
        // FROM, RCPT TO, DATA) goes out while the claim commits, and not a byte
        // of the message before it has (HOLD_OPTION). Unclaimed, the connection
        // is dropped mid-DATA and the relay discards the transaction; the job's
        // next messages claim first (a cancelled broadcast would otherwise drop a
        // connection per message). The claim used to wait alone, a third of the
        // time each connection was held (bench campaigns).
        const hold = claiming.then(
          (c) => {
            if (!c) {
              job.hold = false;
              throw new Error('the message was not claimed');
            }
          },
          // A fresh error: nodemailer rewrites the one it is given (code ESTREAM), and the claim's own goes to the job.
          (err: unknown) => {
            throw new Error('the claim failed', { cause: err });
          },
        );
        hold.catch(() => {});
        const sending = smtp(hold);
        try {
          claimed = await claiming;
        } finally {
          // The connection is the slot's: it is free again only once this send has ended, sent or dropped.
          outcome = await sending;
        }
      } else {
        // No slot of today: the claim counts itself against the cap and fails
        // for every message left once the account is at its limit, so it goes
        // first and no connection is opened only to be dropped.
        claimed = await claiming;
        if (claimed) outcome = await smtp();
      }
      if (!claimed) {
        if (slotDay) allowance.putBack(account.id, row.source);
        const { rows: still } = await sql<{ status: string }>`SELECT status FROM email_send_log WHERE id = ${row.id}`.execute(db);
        // Still claimable: the account is at its limit for today. It waits, `queued`, for the next UTC day.
        if (still[0] && (still[0].status === 'queued' || still[0].status === 'deferred')) waiting.push(row);
        return 'unclaimed';
      }
      rec.result({
        row: { ...row, attempts: claimed.attempts },
        outcome: outcome!,
        messageId: message.messageId.slice(1, -1),
        subject: message.subject,
        accountId: account.id,
      });
      return 'claimed';
    } finally {
      release();
    }
  }

  return async (payload, helpers) => {
    // `email_send_log_id` (one id) is the payload older versions enqueued for retries; such jobs may still wait in the queue after an upgrade.
    const legacy = (payload as { email_send_log_id?: string }).email_send_log_id;
    const ids = [...new Set(payload.email_send_log_ids ?? (legacy ? [legacy] : []))];
    if (ids.length === 0) return;
    // Prepared, one id written as a scalar (src/db/ids.ts): a transactional
    // submit's job names one message, and this read was planned for each.
    const { rows } = await sql<SendRow>`${sql.raw(PREPARED)}
      SELECT id, team_id, campaign_id, campaign_send_id, contact_id, email, attempts, open_tracking, click_tracking, status, source
        FROM email_send_log WHERE ${idIn('id', ids)}
         AND (status = 'queued' OR (status = 'deferred' AND (retry_at IS NULL OR retry_at <= now())))`.execute(db);
    const claimed = new Set<string>();
    if (rows.length > 0) {
      const contexts = await loadContexts(db, rows, appSecret);
      const rec = new Recorder(db, config);
      const waiting: SendRow[] = [];
      const nextMinute: SendRow[] = [];
      const allowance = new Allowance();
      const activeKeys: ActiveKey[] = [];
      for (const row of rows) {
        const ctx = contexts.get(row.id);
        if (!whyNot(ctx)) {
          allowance.want((ctx as Context).account, row.team_id, row.source);
          activeKeys.push(...(ctx as Context).account.dkim);
        }
      }
      // A key that does not open (APP_SECRET changed) signs nothing; the message still goes, unsigned by it.
      const signing: Signing = {
        keys: await loadSigningKeys(db, appSecret, activeKeys, (id, err) => helpers.logger.error(`DKIM key ${id} cannot be used for signing: ${String(err)}`)),
        onErrors: (errors) => helpers.logger.error(`DKIM signing failed: ${errors.map((e) => String((e as { err?: unknown }).err ?? e)).join('; ')}`),
      };
      let outcomes: PromiseSettledResult<'claimed' | 'unclaimed'>[];
      const job: SendJob = { hold: true, large: new RenderAhead({ renderingPerJob: 1, processChars: config.sendRenderedChars }) };
      try {
        await allowance.reserve(db);
        outcomes = await Promise.allSettled(rows.map((row) => {
          const held: { ticket?: Ticket } = {};
          return sendOne(row, contexts.get(row.id), rec, allowance, waiting, signing, nextMinute, job, held).finally(() => held.ticket?.done());
        }));
      } finally {
        job.large.close();
        await allowance.release(db);
      }
      await wakeNextDay(db, waiting);
      await wakeNextMinute(db, nextMinute);
      rows.forEach((row, i) => {
        const o = outcomes[i]!;
        if (o.status === 'fulfilled' && o.value === 'claimed') claimed.add(row.id);
      });
      await rec.close();
      const failed = outcomes.find((o) => o.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }
    // Not claimed here: already done (a duplicate job), or `sending`: another worker's, or a dead one's.
    let busy: unknown;
    for (const id of ids) {
      if (!claimed.has(id)) await reapStale(db, id, config.sendLeaseSeconds).catch((err) => void (busy ??= err));
    }
    // Every write of this job has committed: a broadcast whose last messages these were is complete.
    // A job whose rows were all loaded and none belongs to a campaign send (transactional mail) has none to complete.
    if (rows.length < ids.length || rows.some((r) => r.campaign_send_id !== null)) await completeSendsOfMessages(db, ids);
    if (busy) throw busy;
  };
}

/**
 * Mail that comes back: with `verp` the envelope sender is the message's signed
 * return path, so a bounce names its message; with `capture_replies` Reply-To
 * is its signed reply address (replacing any other). Both need INBOUND_DOMAIN;
 * an account saved with them before the setting was removed sends as without.
 */
function withInboundAddresses(message: SendableMessage, account: Account, row: SendRow, secret: string, domain: string | undefined): void {
  if (!domain) return;
  if (account.verp) message.envelope = { from: returnPathAddress(secret, domain, row.id), to: [row.email] };
  if (account.capture_replies) message.replyTo = replyAddress(secret, domain, row.id);
}
/** The opened private keys of a batch's active DKIM keys, and where signing errors go. */
type Signing = { keys: Map<string, string>; onErrors: (errors: unknown[]) => void };

/**
 * One run of a send job: whether its messages still send their envelope while
 * their claim commits, and its place among the large messages (render-ahead.ts).
 */
type SendJob = { hold: boolean; large: RenderAhead };

/** Today's UTC date, as a reserved slot's day is written (`YYYY-MM-DD`). */
const utcDay = () => new Date().toISOString().slice(0, 10);

// Per account and process, as many messages in flight as the pool has
// connections: a row is claimed only when one is free.
const slots = new Map<string, { free: number; waiting: (() => void)[] }>();

async function slot(accountId: string): Promise<() => void> {
  let s = slots.get(accountId);
  if (!s) slots.set(accountId, (s = { free: SMTP_CONNECTIONS, waiting: [] }));
  if (s.free > 0) s.free--;
  else await new Promise<void>((resolve) => s!.waiting.push(resolve));
  return () => {
    const next = s!.waiting.shift();
    if (next) next();
    else s!.free++;
  };
}

// Results are recorded in groups as they come (every RECORD_EVERY, or after
// RECORD_AFTER_MS). A killed worker leaves the sent-but-unrecorded rows of a
// group in `sending` (failed after the lease as "may or may not have been
// delivered"; they were). Smaller groups cost throughput: groups of 5 took
// bench/campaigns.ts from 488 to 335 e-mails/s (more transactions on the
// campaign's hot counter rows).
const RECORD_EVERY = 25;
const RECORD_AFTER_MS = 250;

class Recorder {
  private results: SendResult[] = [];
  private finished: Finished[] = [];
  private timer: NodeJS.Timeout | null = null;
  private chain: Promise<void> = Promise.resolve();
  private error: unknown = null;
  private readonly db: Db;
  private readonly config: Config;

  constructor(db: Db, config: Config) {
    this.db = db;
    this.config = config;
  }

  result(r: SendResult): void {
    this.results.push(r);
    if (this.results.length >= RECORD_EVERY) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), RECORD_AFTER_MS);
  }

  /** A row that never reaches SMTP: ended at once, if nobody else has it. */
  async finish(f: Finished): Promise<'claimed' | 'unclaimed'> {
    const done = await finish(this.db, [f]);
    return done > 0 ? 'claimed' : 'unclaimed';
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.results;
    this.results = [];
    if (batch.length === 0) return;
    // One group at a time: groups of one job take their locks in order.
    this.chain = this.chain.then(() => recordResults(this.db, this.config, batch)).catch((err) => void (this.error ??= err));
  }

  async close(): Promise<void> {
    this.flush();
    await this.chain;
    if (this.error) throw this.error;
  }
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

type Transactional = {
  variables: Record<string, unknown>;
  to_name: string | null;
  reply_to: string | null;
  list_unsubscribe: boolean;
};

type Context = {
  contact: (Record<string, unknown> & { status: string }) | null;
  /** Set for transactional messages: what the client gave for rendering. */
  transactional: Transactional | null;
  /**
   * The suppression in force for this message, if any: any reason stops
   * campaign mail; transactional mail is stopped by all but an unsubscribe.
   */
  suppressed: SuppressionReason | null;
  account: Account;
  template: { key: string; subject: string | null; content: string; alt_content: string };
  sendData: Record<string, unknown> & { open_tracking: boolean; click_tracking: boolean };
  event: { name: string; occurred_at: string; payload: Record<string, unknown> } | null;
  campaign: { id: string; name: string } | null;
};

/**
 * The batch's ids and address hashes as `h (id, hmac)`. One row (every
 * transactional message is a job of its own) is written as scalars, as
 * idIn() does: keyed by arrays, the prepared statement would be planned at
 * every execution (src/db/ids.ts).
 */
function rowsOf(ids: string[], hmacs: string[]) {
  return ids.length === 1
    ? sql`(SELECT ${ids[0]}::uuid AS id, ${hmacs[0]}::text AS hmac) AS h`
    : sql`unnest(${ids}::uuid[], ${hmacs}::text[]) AS h (id, hmac)`;
}

/**
 * What each claimed row needs to be sent, in one statement; a string says why it cannot be.
 *
 * The message's template, account, campaign send, event and campaign are read
 * by scalar subqueries (one row each, by primary key) rather than as joins:
 * as an eight-way join the statement took 4-6 ms to plan on a quiet machine and
 * 15 ms on a busy one, more than it took to run, and a prepared statement is
 * planned five times per connection before its generic plan is used (and again
 * on every new connection). As subqueries each is planned alone: 0.7 ms in all,
 * the same execution.
 */
async function loadContexts(db: Db, claimed: SendRow[], appSecret: string): Promise<Map<string, Context | string>> {
  // Erased addresses are kept as their keyed hash only: matched by it.
  const hmacs = claimed.map((r) => emailHmac(appSecret, r.email));
  // A batch's messages mostly share a template or two: its content (up to the
  // template cap, a newsletter typically 20-100 KiB) is read once per template
  // (templatesById), not once per message; a lone message reads it inline.
  const single = claimed.length === 1;
  const { rows } = await sql<Record<string, any>>`${sql.raw(PREPARED)}
    SELECT l.id, to_jsonb(k) AS contact,
           (SELECT jsonb_build_object(
             'id', a.id, 'host', a.host, 'port', a.port, 'security', a.security, 'username', a.username,
             'from_email', a.from_email, 'from_name', a.from_name, 'updated_at', a.updated_at, 'status', a.status,
             'daily_limit', a.daily_limit, 'campaign_share_percent', a.campaign_share_percent, 'max_per_minute', a.max_per_minute,
             'verp', a.verp, 'capture_replies', a.capture_replies,
             'dkim', coalesce((SELECT jsonb_agg(jsonb_build_object('id', d.id, 'algorithm', d.algorithm, 'domain', d.domain, 'selector', d.selector))
                                 FROM dkim_keys d WHERE d.mail_account_id = a.id AND d.status = 'active'), '[]'::jsonb))
              FROM mail_accounts a WHERE a.id = l.mail_account_id AND a.team_id = l.team_id) AS account,
           (SELECT ${single ? TEMPLATE_WHOLE : TEMPLATE_KEY} FROM templates t WHERE t.id = l.template_id AND t.team_id = l.team_id) AS template,
           (SELECT jsonb_build_object('send_data', s.send_data, 'status', s.status, 'type', s.campaign_type)
              FROM campaign_sends s WHERE s.id = l.campaign_send_id AND s.team_id = l.team_id) AS send,
           -- occurred_at as JavaScript writes it in any year: a client may give one in UTC year 0 or 10000,
           -- which PostgreSQL's JSON spells "… BC" or "10000-…" (the render's Date could not read them).
           (SELECT jsonb_build_object('name', e.name, 'occurred_at', ${sql.raw(isoSqlAnyYear('e.occurred_at'))}, 'payload', coalesce(e.input, e.payload))
              FROM events e WHERE e.id = l.event_id AND e.team_id = l.team_id) AS event,
           (SELECT jsonb_build_object('id', c.id, 'name', c.name, 'deleted', c.deleted_at IS NOT NULL)
              FROM campaigns c WHERE c.id = l.campaign_id AND c.team_id = l.team_id) AS campaign,
           l.source, l.to_name, l.render,
           (SELECT s.reason FROM suppressions s
             WHERE s.team_id = l.team_id AND (s.email = l.email OR s.email_hmac = h.hmac)
               AND s.reason = ANY (CASE WHEN l.source = 'transactional' THEN ${ALL_MAIL_REASONS}::text[] ELSE ${SUPPRESSION_REASONS}::text[] END)
             ORDER BY array_position(${SUPPRESSION_REASONS}::text[], s.reason) DESC LIMIT 1) AS suppressed
      FROM email_send_log l
      JOIN ${rowsOf(claimed.map((r) => r.id), hmacs)} ON h.id = l.id
      LEFT JOIN contacts k ON k.id = l.contact_id AND k.team_id = l.team_id
     WHERE ${idIn('l.id', claimed.map((r) => r.id))}`.execute(db);
  const byId = new Map(claimed.map((r) => [r.id, r]));
  const templates = single ? null : await templatesById(db, rows.map((r) => ({ template: r.template as TemplateRef | null, team_id: byId.get(r.id)!.team_id })));
  const out = new Map<string, Context | string>();
  for (const r of rows) {
    // Updated between the two reads: the message goes with the version read second, as if queued a moment later.
    if (templates && r.template) r.template = templates.get(r.template.id) ?? null;
    const row = byId.get(r.id)!;
    const transactional = r.source === 'transactional';
    if (!r.contact && !transactional) out.set(r.id, 'cancelled');
    // Deleted after this message was queued (campaigns/manage.ts cancels what it finds; this catches a late decision).
    else if (r.campaign?.deleted === true) out.set(r.id, 'campaign deleted');
    // Broadcasts and automation sends only: an event-triggered send's stop halts new decisions, not what is queued.
    else if (listedSend(r.send?.type) && r.send.status === 'paused') out.set(r.id, 'paused');
    else if (listedSend(r.send?.type) && r.send.status === 'cancelled') out.set(r.id, 'cancelled');
    else if (!r.account) out.set(r.id, 'mail account deleted');
    else if (r.account.status !== 'active') out.set(r.id, 'cancelled');
    else if (!r.template) out.set(r.id, 'template deleted');
    else {
      const render = (r.render ?? {}) as Record<string, any>;
      out.set(r.id, {
        contact: r.contact ?? null,
        account: { ...r.account, updated_at: new Date(r.account.updated_at) },
        // A transactional `subject` replaces the template's (rendered with Liquid the same way).
        template: transactional && render.subject != null ? { ...r.template, subject: render.subject } : r.template,
        sendData: {
          ...(transactional ? (render.from_name != null ? { from_name: render.from_name } : {}) : (r.send?.send_data ?? {})),
          open_tracking: row.open_tracking, click_tracking: row.click_tracking,
        },
        event: r.event,
        // As templates see it: {id, name}.
        campaign: r.campaign ? { id: r.campaign.id, name: r.campaign.name } : null,
        suppressed: r.suppressed ?? null,
        transactional: transactional
          ? {
              variables: render.variables ?? {},
              to_name: r.to_name ?? null,
              reply_to: render.reply_to ?? null,
              list_unsubscribe: usesUnsubscribeUrl(r.template),
            }
          : null,
      });
    }
  }
  return out;
}

type TemplateRef = { id: string };
type TemplateRow = { key: string; subject: string | null; content: string; alt_content: string };
// `key`, a template's version: it names the compiled template cached in the render pool's threads.
const TEMPLATE_WHOLE = sql`jsonb_build_object('key', t.id || '@' || t.updated_at, 'subject', t.subject, 'content', t.content, 'alt_content', t.alt_content)`;
// In a batch, only which template (of the message's team) the message uses; templatesById reads it.
const TEMPLATE_KEY = sql`jsonb_build_object('id', t.id)`;

/**
 * The batch's templates by id, each read once, by its id and the team of the
 * message that uses it (one updated since the batch's first read is found at
 * its new version).
 */
async function templatesById(db: Db, refs: { template: TemplateRef | null; team_id: string }[]): Promise<Map<string, TemplateRow>> {
  const pairs = new Map<string, { id: string; team_id: string }>();
  for (const r of refs) if (r.template) pairs.set(r.template.id, { id: r.template.id, team_id: r.team_id });
  const out = new Map<string, TemplateRow>();
  if (pairs.size === 0) return out;
  const list = [...pairs.values()];
  const { rows } = await sql<TemplateRow & { id: string }>`${sql.raw(PREPARED)}
    SELECT t.id, t.id || '@' || t.updated_at AS key, t.subject, t.content, t.alt_content
      FROM ${recordset(JSON.stringify(list), list.length, 'x (id uuid, team_id uuid)')} AS x
      JOIN templates t ON t.id = x.id AND t.team_id = x.team_id`.execute(db);
  for (const { id, ...t } of rows) out.set(id, t);
  return out;
}

// Transactional mail carries no List-Unsubscribe header unless its template
// offers an unsubscribe link itself (a receipt is not a newsletter).
function usesUnsubscribeUrl(t: { subject: string | null; content: string; alt_content: string }): boolean {
  return /\bunsubscribe_url\b/.test(`${t.content}\n${t.alt_content ?? ''}`);
}

type Finished = { id: string; status: 'cancelled' | 'failed' | 'suppressed'; error: string };

/** Why a loaded row ends without an SMTP claim, or null when it may be sent. */
function whyNot(loaded: Context | string | undefined): Omit<Finished, 'id'> | null {
  if (loaded === undefined || typeof loaded === 'string') {
    const error = loaded ?? 'cancelled';
    return { status: error === 'cancelled' || error === 'campaign deleted' ? 'cancelled' : 'failed', error };
  }
  // Suppressed since it was queued (a hard bounce of an earlier message, an
  // entry added to the list, an unsubscribe for campaign mail).
  if (loaded.suppressed) {
    return { status: loaded.transactional ? 'suppressed' : 'cancelled', error: `address suppressed (${loaded.suppressed})` };
  }
  // An unsubscribe stops marketing only: a transactional message still goes.
  if (!loaded.transactional && loaded.contact?.status !== 'active') return { status: 'cancelled', error: `contact is ${loaded.contact?.status}` };
  return null;
}

/** Ends sends that never reached the SMTP server (nothing to count, no webhook), unless another worker has them. */
async function finish(db: Db, done: Finished[]): Promise<number> {
  if (done.length === 0) return 0;
  const res = await sql`${sql.raw(PREPARED)}
    UPDATE email_send_log l SET status = x.status, last_error = x.error, updated_at = now()
      FROM ${recordset(JSON.stringify(done), done.length, 'x (id uuid, status text, error text)')} AS x
     WHERE l.id = x.id AND l.status IN ('queued', 'deferred')`.execute(db);
  return Number(res.numAffectedRows ?? 0);
}
