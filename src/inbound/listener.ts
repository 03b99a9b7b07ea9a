// The inbound SMTP listener (smtp-server): where DSNs, ARF reports and replies
// to the signed addresses of INBOUND_DOMAIN arrive. Started by the worker
// process when INBOUND_SMTP_PORT is set (docs/operations.md).
//
// Never a relay: RCPT TO is accepted only for a signed return-path or reply
// address whose signature verifies and whose message is still in the log, and
// for the feedback-loop address; everything else is refused at RCPT with 550.
// Caps: message size (SIZE, and the stream is cut past it), recipients per
// message, connections, socket inactivity; MIME parts and depth in the parser.
//
// The message is classified in the untrusted pool (never on this event loop)
// and applied with applyFeedback. Applications of concurrent sessions are
// batched (what arrives while a batch is recorded goes into the next), and a
// session is answered 250 only after its batch committed: a crash never loses
// a report we acknowledged. A database failure answers 451, so the sending MTA
// retries later; a message we cannot match or read is accepted and dropped
// (logged and counted), never refused into a retry loop.
import { readFileSync, statSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createSecureContext } from 'node:tls';
import { sql } from 'kysely';
import { Counter, register } from 'prom-client';
import { SMTPServer, type SMTPServerDataStream, type SMTPServerSession } from 'smtp-server';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { Batcher } from '../lib/batcher.ts';
import { untrustedPool, UntrustedWorkError, type UntrustedPool } from '../untrusted/pool.ts';
import { parseInboundAddress, type InboundAddress } from './address.ts';
import { applyFeedback, type Feedback } from './feedback.ts';
import type { ClassifyInput } from './parse-task.ts';
import type { Classified } from './parse.ts';

type Log = { info(obj: object, msg: string): void; warn(obj: object, msg: string): void; error?(obj: object, msg: string): void };

export type InboundListener = {
  port: number;
  /** Reloads the certificate files if they changed (the listener does it hourly by itself). */
  reloadTls(): void;
  close(): Promise<void>;
};

/** How often the certificate files are looked at for a renewal (a changed mtime reloads them). */
const TLS_RELOAD_MS = 60 * 60_000;

/** A batch (of feedback to record, of addresses to look up) goes at once when this many wait, else BATCH_MS after its first. */
const BATCH_MAX = 200;
/** Wall-clock budget of one message's parse in the pool (a 10 MiB message with a hundred parts takes well under it; a busy machine's threads run at nice 10). */
const PARSE_BUDGET_MS = 10_000;
const BATCH_MS = 5;

const messagesCounter = (register.getSingleMetric('plover_inbound_messages_total') as Counter | undefined)
  ?? new Counter({ name: 'plover_inbound_messages_total', help: 'Messages taken by the inbound SMTP listener, by result', labelNames: ['result'] });
const refusedCounter = (register.getSingleMetric('plover_inbound_rcpt_refused_total') as Counter | undefined)
  ?? new Counter({ name: 'plover_inbound_rcpt_refused_total', help: 'RCPT TO refused by the inbound listener (not ours, forged, unknown)', labelNames: ['why'] });

/** Messages classified in one pool task at most, and their bytes at most (a larger message goes alone). */
const CLASSIFY_BATCH_MAX = 50;
const CLASSIFY_BATCH_BYTES = 1024 * 1024;

/**
 * Classifies the messages that arrive together in one pool task per team
 * instead of one each. A team's tasks run one after another on its share of
 * the pool, each a round trip through this event loop: one task a message
 * made that round trip the limit (the thread sat idle half the time while 50
 * sessions waited 75 ms on average for their parse; bench/inbound.ts). What
 * arrives while a team's batch is in the pool goes into its next one. A batch
 * that fails the pool (over its budget or heap) is classified again one
 * message at a time, so one hostile message fails only itself.
 */
class ClassifyBatcher {
  private readonly waiting = new Map<string, { input: ClassifyInput; bytes: number; resolve: (r: Classified[]) => void; reject: (e: unknown) => void }[]>();
  private readonly busy = new Set<string>();
  private readonly pool: UntrustedPool;

  constructor(pool: UntrustedPool) {
    this.pool = pool;
  }

  classify(team: string, input: ClassifyInput): Promise<Classified[]> {
    return new Promise((resolve, reject) => {
      let list = this.waiting.get(team);
      if (!list) this.waiting.set(team, (list = []));
      list.push({ input, bytes: input.raw.byteLength, resolve, reject });
      if (!this.busy.has(team)) this.next(team);
    });
  }

  private next(team: string): void {
    const list = this.waiting.get(team);
    if (!list || list.length === 0) return;
    // The first message always; more while the batch stays within its caps.
    let bytes = 0;
    let n = 0;
    while (n < list.length && n < CLASSIFY_BATCH_MAX && (n === 0 || bytes + list[n]!.bytes <= CLASSIFY_BATCH_BYTES)) bytes += list[n++]!.bytes;
    const batch = list.splice(0, n);
    if (list.length === 0) this.waiting.delete(team);
    this.busy.add(team);
    void this.run(team, batch).finally(() => {
      this.busy.delete(team);
      this.next(team);
    });
  }

  private async run(team: string, batch: { input: ClassifyInput; resolve: (r: Classified[]) => void; reject: (e: unknown) => void }[]): Promise<void> {
    const one = (input: ClassifyInput) => this.pool.run<Classified[]>('classifyInbound', input, PARSE_BUDGET_MS, team);
    if (batch.length === 1) {
      await one(batch[0]!.input).then(batch[0]!.resolve, batch[0]!.reject);
      return;
    }
    try {
      const results = await this.pool.run<Classified[][]>('classifyInboundBatch', batch.map((b) => b.input), PARSE_BUDGET_MS, team);
      batch.forEach((b, i) => b.resolve(results[i]!));
    } catch (err) {
      if (!(err instanceof UntrustedWorkError) || err.reason === 'overloaded') {
        for (const b of batch) b.reject(err);
        return;
      }
      // One of them is over a budget: each alone, so only that one fails.
      await Promise.all(batch.map((b) => one(b.input).then(b.resolve, b.reject)));
    }
  }
}

type Session = SMTPServerSession & { inbound?: InboundAddress[]; inboundTeam?: string };

function smtpError(code: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode: code });
}

export async function startInboundListener(deps: { db: Db; config: Config; log: Log; pool?: UntrustedPool }): Promise<InboundListener> {
  const { db, config, log } = deps;
  const inbound = config.inbound;
  const domain = inbound.domain;
  const secret = config.appSecret;
  if (!domain) throw new Error('the inbound listener needs INBOUND_DOMAIN');
  if (!secret) throw new Error('the inbound listener needs APP_SECRET (it verifies the signed addresses)');
  const pool = deps.pool ?? untrustedPool();
  // The feedback of concurrent sessions is recorded in one applyFeedback call;
  // each session waits for its commit. One batch at a time (batches take their
  // row locks in order, never against each other).
  const applyOpts = { softBounceLimit: inbound.softBounceLimit, softBounceDays: inbound.softBounceDays, log };
  const batcher = new Batcher<Feedback[], void>(async (lists) => {
    await applyFeedback(db, lists.flat(), applyOpts);
    return lists.map(() => undefined);
  }, { max: BATCH_MAX, delayMs: BATCH_MS });
  const limits = { maxParts: inbound.maxMimeParts, maxDepth: inbound.maxMimeDepth };
  const classifier = new ClassifyBatcher(pool);

  /**
   * Is the message of a signed address still in the log (retention removes it:
   * the address expires with it), and whose is it? The RCPTs of concurrent
   * sessions are looked up together: one statement per round instead of one
   * per recipient (at a thousand DSNs a second the per-query round trip was
   * the listener's largest cost; bench/inbound.ts).
   */
  const teams = new Batcher<string, string | null>(async (ids) => {
    const { rows } = await sql<{ id: string; team_id: string }>`SELECT id, team_id FROM email_send_log WHERE id = ANY(${[...new Set(ids)]}::uuid[])`.execute(db);
    const byId = new Map(rows.map((r) => [r.id, r.team_id]));
    return ids.map((id) => byId.get(id) ?? null);
  }, { max: BATCH_MAX });
  const teamOf = (id: string) => teams.add(id);

  async function onRcpt(address: string, session: Session): Promise<void> {
    const list = (session.inbound ??= []);
    if (session.envelope.rcptTo.length >= inbound.maxRecipients) {
      refusedCounter.inc({ why: 'too_many' });
      throw smtpError(452, `4.5.3 Too many recipients (at most ${inbound.maxRecipients})`);
    }
    const parsed = parseInboundAddress(secret!, domain!, inbound.fblAddress, address);
    if (!parsed) {
      refusedCounter.inc({ why: 'not_ours' });
      throw smtpError(550, '5.1.1 No such recipient here (this server takes mail only for its signed addresses; relaying denied)');
    }
    if (parsed.type !== 'fbl') {
      const team = await teamOf(parsed.message_id);
      if (!team) {
        refusedCounter.inc({ why: 'unknown_message' });
        throw smtpError(550, '5.1.1 No such recipient here (address expired)');
      }
      // The parse runs on behalf of the message's team (the pool's fair share between teams).
      session.inboundTeam ??= team;
    }
    list.push(parsed);
  }

  async function onMessage(raw: Buffer, session: Session): Promise<void> {
    const hints = [...new Map((session.inbound ?? []).map((h) => [JSON.stringify(h), h])).values()];
    const input: ClassifyInput = { raw, hints, limits };
    const results = await classifier.classify(session.inboundTeam ?? '', input);
    const items: Feedback[] = [];
    for (const r of results) {
      if (Array.isArray(r)) items.push(...r.map((f) => ({ ...f, source: 'smtp' })));
      else log.info({ reason: r.reason, rcpt: session.envelope.rcptTo.map((t) => t.address) }, 'inbound message not applied; dropped');
    }
    messagesCounter.inc({ result: items.length > 0 ? 'feedback' : 'dropped' });
    if (items.length > 0) await batcher.add(items);
  }

  // STARTTLS with the operator's certificate (INBOUND_TLS_CERT/KEY), else none:
  // smtp-server's built-in certificate would be a self-signed one for another name.
  const tlsFiles = inbound.tlsCertFile && inbound.tlsKeyFile ? { cert: inbound.tlsCertFile, key: inbound.tlsKeyFile } : null;
  const readTls = () => {
    try {
      return { cert: readFileSync(tlsFiles!.cert), key: readFileSync(tlsFiles!.key), minVersion: 'TLSv1.2' as const };
    } catch (err) {
      throw new Error(`the inbound listener could not read INBOUND_TLS_CERT/INBOUND_TLS_KEY: ${(err as Error).message}`);
    }
  };
  const tlsMtime = () => Math.max(statSync(tlsFiles!.cert).mtimeMs, statSync(tlsFiles!.key).mtimeMs);
  const server = new SMTPServer({
    name: domain,
    banner: 'feedback only',
    secure: false,
    ...(tlsFiles ? readTls() : {}),
    disabledCommands: tlsFiles ? ['AUTH'] : ['AUTH', 'STARTTLS'],
    authOptional: true,
    size: inbound.maxMessageBytes,
    maxClients: inbound.maxClients,
    socketTimeout: inbound.socketTimeoutMs,
    closeTimeout: 5_000,
    logger: false,
    // A reverse DNS lookup per connection would tie each session to the resolver's speed; nothing here uses the name.
    disableReverseLookup: true,
    // What RCPT learnt belongs to one mail transaction: a connection may carry many (a pooled sender).
    onMailFrom(_address, session, callback) {
      const s = session as Session;
      s.inbound = [];
      s.inboundTeam = undefined;
      callback();
    },
    onRcptTo(address, session, callback) {
      onRcpt(address.address, session as Session).then(() => callback(), (err: Error) => callback(err));
    },
    onData(stream: SMTPServerDataStream, session, callback) {
      const chunks: Buffer[] = [];
      let bytes = 0;
      stream.on('data', (c: Buffer) => {
        // Past the limit the rest is read and thrown away (smtp-server sets sizeExceeded).
        if (bytes + c.length <= inbound.maxMessageBytes) chunks.push(c);
        bytes += c.length;
      });
      stream.on('end', () => {
        if (stream.sizeExceeded || bytes > inbound.maxMessageBytes) {
          messagesCounter.inc({ result: 'too_large' });
          return callback(smtpError(552, `5.3.4 Message too big (at most ${inbound.maxMessageBytes} bytes)`));
        }
        onMessage(Buffer.concat(chunks, bytes), session as Session).then(
          () => callback(null, 'Ok: feedback taken'),
          (err: unknown) => {
            messagesCounter.inc({ result: 'retry_later' });
            log.warn({ err: (err as Error).message }, 'inbound message not processed; the sender was asked to retry');
            callback(smtpError(451, '4.3.0 Temporary failure, try again later'));
          },
        );
      });
    },
  });
  server.on('error', (err) => log.warn({ err: err.message }, 'inbound SMTP listener error'));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(inbound.smtpPort ?? 25, inbound.smtpHost, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.server.address() as AddressInfo;
  log.info({ port, host: inbound.smtpHost, domain, starttls: !!tlsFiles }, 'inbound SMTP listener started');
  // A renewed certificate (certbot and the like replace the files) is taken
  // without a restart; a broken pair keeps the one in use and says so.
  let loadedAt = tlsFiles ? tlsMtime() : 0;
  const reloadTls = () => {
    if (!tlsFiles) return;
    try {
      const m = tlsMtime();
      if (m === loadedAt) return;
      const material = readTls();
      // Checked on its own first: smtp-server's updateSecureContext drops the
      // context in use before it builds the new one, so a bad pair would leave none.
      createSecureContext(material);
      server.updateSecureContext(material);
      loadedAt = m;
      log.info({ cert: tlsFiles.cert }, 'inbound SMTP listener: certificate reloaded');
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'inbound SMTP listener: certificate not reloaded; the previous one stays');
    }
  };
  const reload = tlsFiles ? setInterval(reloadTls, TLS_RELOAD_MS) : null;
  reload?.unref();
  return {
    port,
    reloadTls,
    async close() {
      if (reload) clearInterval(reload);
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all([batcher.close(), teams.close()]);
    },
  };
}
