// imap_poll: the periodic job that reads each mail account's bounce/reply
// mailbox (imap/settings.ts). One run claims the due mailboxes (at most
// IMAP_ACCOUNTS_PER_RUN, one statement, SKIP LOCKED so two workers never read
// one mailbox at once) and pushes their next poll forward before reading, so a
// crash or a hung server never turns into a tight loop. Per mailbox: connect
// (the host checked against the address rules again, at connect time), read
// at most IMAP_MESSAGES_PER_POLL unseen messages, each at most
// IMAP_MAX_MESSAGE_BYTES (a larger one is marked seen unread and logged),
// classify each in the untrusted pool with the inbound listener's parser, apply
// what they say through the feedback core (limited to the account's team),
// then mark them \Seen. A message is marked only after its feedback is
// committed: a failure in between reads it again next time, and the core
// records the same report once. An error is logged and stored on the mailbox,
// and the next poll waits twice as long each time (up to an hour).
import { isIP } from 'node:net';
import type { Task } from 'graphile-worker';
import { sql } from 'kysely';
import type { Config } from '../../config.ts';
import type { Db } from '../../db/pool.ts';
import { JOB_PRIORITY, type JobName } from '../../lib/jobs.ts';
import { checkHost, parseAllowList, systemResolver, type AllowList, type Resolver } from '../../lib/net-guard.ts';
import { untrustedPool } from '../../untrusted/pool.ts';
import { applyFeedback, type Feedback } from '../feedback.ts';
import type { Classified } from '../parse.ts';
import { imapPasswordBox, imapPortRefusal } from './settings.ts';

/** Every minute; a mailbox is polled when its own next_poll_at (IMAP_POLL_INTERVAL_S) is due. */
export const IMAP_POLL_CRON = `* * * * * ${'imap_poll' satisfies JobName} ?max=1&priority=${JOB_PRIORITY.background}`;

const MAX_BACKOFF_S = 3_600;
/** Wall-clock budget of one message's classification in the pool. */
const CLASSIFY_BUDGET_MS = 10_000;

export type Mailbox = {
  mail_account_id: string;
  team_id: string;
  host: string;
  port: number;
  security: 'tls' | 'starttls' | 'none';
  username: string;
  password_enc: Buffer;
  folder: string;
  failures: number;
};

export type PollResult = { read: number; applied: number; unmatched: number; skipped: number; more: boolean };

export type ImapPollDeps = {
  db: Db;
  config: Config;
  log?: { info(o: object, m: string): void; warn(o: object, m: string): void };
  resolve?: Resolver;
  /** Classifies one raw message (default: the parser in the untrusted pool). */
  classify?: (raw: Buffer) => Promise<Classified>;
};

/** Claims the due mailboxes of active accounts and pushes their next poll forward (one statement). */
export async function claimDueMailboxes(db: Db, limit: number, intervalS: number): Promise<Mailbox[]> {
  const { rows } = await sql<Mailbox>`
    UPDATE mail_account_imap i
       SET next_poll_at = now() + make_interval(secs => ${intervalS}), updated_at = now()
     WHERE i.mail_account_id IN (
             SELECT d.mail_account_id FROM mail_account_imap d
               JOIN mail_accounts a ON a.id = d.mail_account_id AND a.status = 'active'
              WHERE d.next_poll_at <= now()
              ORDER BY d.next_poll_at
              LIMIT ${limit}
                FOR UPDATE OF d SKIP LOCKED)
    RETURNING i.mail_account_id, i.team_id, i.host, i.port, i.security, i.username, i.password_enc, i.folder, i.failures`.execute(db);
  return rows;
}

/** The address to connect to: the host checked as at save time, now (DNS rebinding), and the port rule. */
async function targetOf(box: Mailbox, allow: AllowList, resolve: Resolver): Promise<string> {
  const check = await checkHost(box.host, allow, resolve);
  if (!check.ok) throw new Error(`refused to connect: ${check.problem}`);
  const portProblem = imapPortRefusal(allow, box.host, box.port, check.addresses);
  if (portProblem) throw new Error(`refused to connect: ${portProblem}`);
  if (isIP(box.host) !== 0) return box.host;
  // An allowed name (no lookup made) connects by name; otherwise to an address just checked.
  if (check.addresses.length === 0) {
    if (!check.resolved) throw new Error(`${box.host} does not resolve`);
    return box.host;
  }
  return check.addresses[0]!;
}

async function defaultClassify(raw: Buffer, config: Config): Promise<Classified> {
  const limits = { maxParts: config.inbound.maxMimeParts, maxDepth: config.inbound.maxMimeDepth };
  const [result] = await untrustedPool().run<Classified[]>('classifyInbound', { raw, hints: [], limits }, CLASSIFY_BUDGET_MS);
  return result ?? { kind: 'unmatched', reason: 'no classification' };
}

/** Reads one mailbox once (see the head of this file). Throws on a connection, login or protocol error. */
export async function pollMailbox(box: Mailbox, deps: ImapPollDeps): Promise<PollResult> {
  const { config, db } = deps;
  const limits = config.inboundProviders;
  if (!config.appSecret) throw new Error('APP_SECRET is not configured');
  const password = imapPasswordBox(config.appSecret).open(box.password_enc);
  const host = await targetOf(box, parseAllowList(config.allowedPrivateTargets), deps.resolve ?? systemResolver);
  const classify = deps.classify ?? ((raw: Buffer) => defaultClassify(raw, config));
  // Loaded at the first poll: a worker whose teams poll no mailbox never holds imapflow (about 0.7 MB of source).
  const { ImapFlow } = await import('imapflow');
  const client = new ImapFlow({
    host,
    port: box.port,
    secure: box.security === 'tls',
    doSTARTTLS: box.security === 'starttls' ? true : box.security === 'none' ? false : undefined,
    // The certificate is checked against the name the team gave, whatever address we connect to.
    tls: isIP(box.host) === 0 ? { servername: box.host } : {},
    auth: { user: box.username, pass: password },
    logger: false,
    disableAutoIdle: true,
    connectionTimeout: limits.imapTimeoutMs,
    greetingTimeout: limits.imapTimeoutMs,
    socketTimeout: limits.imapTimeoutMs,
    // A hostile server cannot make us hold more than one message's worth.
    maxLiteralSize: limits.imapMaxMessageBytes + 64 * 1024,
    maxResponseSize: limits.imapMaxMessageBytes + 1024 * 1024,
  });
  client.on('error', () => {}); // surfaced by the failing command; without a listener it would be thrown at the process
  const result: PollResult = { read: 0, applied: 0, unmatched: 0, skipped: 0, more: false };
  await client.connect();
  try {
    const lock = await client.getMailboxLock(box.folder);
    try {
      const unseen = (await client.search({ seen: false }, { uid: true })) || [];
      const uids = unseen.sort((a, b) => a - b).slice(0, limits.imapMessagesPerPoll);
      result.more = unseen.length > uids.length;
      if (uids.length === 0) return result;
      const sizes = new Map<number, number>();
      for (const m of await client.fetchAll(uids, { uid: true, size: true }, { uid: true })) sizes.set(m.uid, m.size ?? 0);
      const tooBig = uids.filter((u) => (sizes.get(u) ?? 0) > limits.imapMaxMessageBytes);
      if (tooBig.length > 0) {
        deps.log?.warn({ mail_account_id: box.mail_account_id, uids: tooBig, max_bytes: limits.imapMaxMessageBytes }, 'IMAP messages over the size cap marked seen unread');
        await client.messageFlagsAdd(tooBig, ['\\Seen'], { uid: true });
        result.skipped += tooBig.length;
      }
      const readable = uids.filter((u) => sizes.has(u) && !tooBig.includes(u));
      // In slices: a slice's feedback is committed before its messages are marked seen.
      for (let i = 0; i < readable.length; i += 20) {
        const slice = readable.slice(i, i + 20);
        const items: Feedback[] = [];
        for (const uid of slice) {
          const msg = await client.fetchOne(String(uid), { uid: true, source: { maxLength: limits.imapMaxMessageBytes } }, { uid: true });
          if (!msg || !msg.source) continue;
          result.read++;
          const classified = await classify(msg.source);
          if (Array.isArray(classified)) {
            items.push(...classified.map((f) => ({ ...f, team_id: box.team_id, source: 'imap', raw_ref: `imap:${box.mail_account_id}:${uid}` })));
          } else {
            result.unmatched++;
            deps.log?.info({ mail_account_id: box.mail_account_id, uid, reason: classified.reason }, 'IMAP message not applied; marked seen');
          }
        }
        if (items.length > 0) {
          const applied = await applyFeedback(db, items, {
            softBounceLimit: config.inbound.softBounceLimit,
            softBounceDays: config.inbound.softBounceDays,
            ...(deps.log ? { log: deps.log } : {}),
          });
          result.applied += applied.applied + applied.duplicates;
          result.unmatched += applied.unmatched;
        }
        await client.messageFlagsAdd(slice, ['\\Seen'], { uid: true });
      }
    } finally {
      lock.release();
    }
  } finally {
    await client.logout().catch(() => client.close());
  }
  return result;
}

/** Records a poll's outcome on the mailbox: the next poll, the error (or none), the count. */
async function recordPoll(db: Db, box: Mailbox, intervalS: number, outcome: { ok: true; result: PollResult } | { ok: false; error: string }) {
  if (outcome.ok) {
    // More unseen than one poll takes: the next run continues at once.
    const next = outcome.result.more ? 0 : intervalS;
    await sql`
      UPDATE mail_account_imap SET last_polled_at = now(), last_error = NULL, failures = 0,
             messages_processed = messages_processed + ${outcome.result.read + outcome.result.skipped},
             next_poll_at = now() + make_interval(secs => ${next}), updated_at = now()
       WHERE mail_account_id = ${box.mail_account_id}`.execute(db);
  } else {
    const wait = Math.min(MAX_BACKOFF_S, intervalS * 2 ** Math.min(box.failures + 1, 12));
    await sql`
      UPDATE mail_account_imap SET last_error = ${outcome.error.slice(0, 500)}, failures = failures + 1,
             next_poll_at = now() + make_interval(secs => ${wait}), updated_at = now()
       WHERE mail_account_id = ${box.mail_account_id}`.execute(db);
  }
}

/** One run: claim due mailboxes, poll them two at a time, record each outcome. */
export async function pollDueMailboxes(deps: ImapPollDeps): Promise<{ polled: number; failed: number }> {
  const limits = deps.config.inboundProviders;
  const boxes = await claimDueMailboxes(deps.db, limits.imapAccountsPerRun, limits.imapPollIntervalS);
  let failed = 0;
  const queue = [...boxes];
  const lane = async () => {
    for (let box = queue.shift(); box; box = queue.shift()) {
      try {
        const result = await pollMailbox(box, deps);
        await recordPoll(deps.db, box, limits.imapPollIntervalS, { ok: true, result });
        if (result.read + result.skipped > 0) deps.log?.info({ mail_account_id: box.mail_account_id, ...result }, 'polled an IMAP mailbox');
      } catch (err) {
        failed++;
        const error = (err as Error).message || String(err);
        deps.log?.warn({ mail_account_id: box.mail_account_id, team_id: box.team_id, err: error }, 'IMAP poll failed');
        await recordPoll(deps.db, box, limits.imapPollIntervalS, { ok: false, error });
      }
    }
  };
  await Promise.all([lane(), lane()]);
  return { polled: boxes.length, failed };
}

export function imapPollTask(deps: ImapPollDeps): Task<'imap_poll'> {
  return async (_payload, helpers) => {
    const log = deps.log ?? {
      info: (o: object, m: string) => helpers.logger.info(m, o as Record<string, unknown>),
      warn: (o: object, m: string) => helpers.logger.warn(m, o as Record<string, unknown>),
    };
    await pollDueMailboxes({ ...deps, log });
  };
}
