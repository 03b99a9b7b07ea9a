// The delivery dispatcher, one per worker process. It claims due deliveries in
// batches (one statement), sends them concurrently, and writes results back in
// batches (one statement per flush). It sleeps until a NOTIFY (new deliveries,
// an enable, a resend) or until the next retry falls due.
//
// Why not one graphile-worker job per attempt: a job locked by a killed worker
// stays locked for 4 hours (graphile-worker's job expiry), and per-job claim and
// completion cost four statements per delivery; the batch claim with a lease
// recovers a killed worker's deliveries after one lease and needs two
// statements per batch.
import type { FastifyBaseLogger } from 'fastify';
import type pg from 'pg';
import type { Agent } from 'undici';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import type { SecretBox } from '../lib/secrets.ts';
import { attemptDelivery, deliveryAgent, nextAttemptAt } from './deliver.ts';
import { claimDueDeliveries, DELIVERY_CHANNEL, recordAttempts, secondsUntilNextDue, type AttemptResult, type ClaimedDelivery } from './deliveries.ts';
import { parseAllowList, type AllowList } from '../lib/net-guard.ts';
import { signingKeys, type SigningKeys } from './signing.ts';
import { webhookSecretBox } from './queries.ts';

type Logger = Pick<FastifyBaseLogger, 'info' | 'warn' | 'error'>;

const MAX_CLAIM = 500;
const FLUSH_EVERY_MS = 25;
const FLUSH_AT = 200;
// Even without a NOTIFY (e.g. a lost LISTEN connection) due work is found this often.
const MAX_SLEEP_MS = 5_000;

export class WebhookDispatcher {
  private readonly db: Db;
  private readonly pool: pg.Pool;
  private readonly config: Config;
  private readonly log: Logger;
  private readonly allow: AllowList;
  private readonly box: SecretBox;
  private readonly agent: Agent;
  private readonly leaseMs: number;
  private running = false;
  private inFlight = 0;
  private results: AttemptResult[] = [];
  private flushTimer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();
  private wake: (() => void) | null = null;
  /** A poke came while the loop was awake (see poke()). */
  private poked = false;
  private listener: pg.PoolClient | null = null;
  private loopDone: Promise<void> = Promise.resolve();
  private readonly claimFloor: number;
  private readonly keys = new Map<string, { enc: Buffer; keys: SigningKeys }>();

  constructor(deps: { db: Db; pool: pg.Pool; config: Config; log: Logger }) {
    this.db = deps.db;
    this.pool = deps.pool;
    this.config = deps.config;
    this.log = deps.log;
    this.allow = parseAllowList(deps.config.allowedPrivateTargets);
    this.box = webhookSecretBox(deps.config.appSecret);
    this.agent = deliveryAgent(this.allow, deps.config.webhookTimeoutMs);
    // An attempt cannot outlive its timeout; the rest covers recording it. A
    // killed worker's claims are retried once this runs out.
    this.leaseMs = 2 * deps.config.webhookTimeoutMs + 5_000;
    this.claimFloor = Math.max(1, Math.floor(deps.config.webhookConcurrency / 4));
  }

  async start(): Promise<void> {
    this.running = true;
    await this.listen();
    this.loopDone = this.loop();
  }

  /** Stops claiming, lets attempts in flight finish (bounded by the timeout) and records them. */
  async stop(): Promise<void> {
    this.running = false;
    this.poke();
    await this.loopDone;
    while (this.inFlight > 0) await new Promise((r) => setTimeout(r, 20));
    await this.flush();
    if (this.listener) {
      const client = this.listener;
      await client.query(`UNLISTEN ${DELIVERY_CHANNEL}`).catch(() => {});
      this.dropListener(client);
    }
    await this.agent.close();
  }

  private async listen(): Promise<void> {
    let client: pg.PoolClient | undefined;
    try {
      client = await this.pool.connect();
      const c = client;
      c.on('notification', () => this.poke());
      this.onListenerError = (err: Error) => {
        this.log.warn({ err }, 'webhook dispatcher lost its LISTEN connection; polling until it is back');
        this.dropListener(c, err);
        this.relisten();
      };
      c.on('error', this.onListenerError);
      await c.query(`LISTEN ${DELIVERY_CHANNEL}`);
      this.listener = c;
      this.poke();
    } catch (err) {
      // A client whose LISTEN failed (the database went away between connect
      // and LISTEN) goes back to the pool broken, not kept: else every such
      // retry during an outage would leak one pooled connection.
      if (client) this.dropListener(client, err as Error);
      this.log.warn({ err }, 'webhook dispatcher could not LISTEN; retrying');
      this.relisten();
    }
  }

  /** listen() handles its own failures (it logs and retries), so nothing is left to await. */
  private relisten(): void {
    setTimeout(() => {
      if (this.running) void this.listen();
    }, 1_000);
  }

  private onListenerError: ((err: Error) => void) | null = null;

  /** Releases the LISTEN client once (an error after stop() released it must not release it again). */
  private dropListener(client: pg.PoolClient, err?: Error): void {
    if (this.onListenerError) client.off('error', this.onListenerError);
    this.onListenerError = null;
    client.removeAllListeners('notification');
    if (this.listener === client) this.listener = null;
    try {
      client.release(err);
    } catch {
      // already released
    }
  }

  /**
   * Wakes the loop. A poke while the loop is not asleep (it is claiming, or
   * asking when the next delivery is due) is kept for its next sleep, which
   * then returns at once: that question may have been answered before the
   * write the poke announces (a failed attempt's retry time, a new delivery),
   * and without the flag the retry waited for the next wake-up, up to
   * MAX_SLEEP_MS (a retry scheduled at 0.8 s came at 2.1 s in CI).
   */
  private poke(): void {
    const w = this.wake;
    this.wake = null;
    if (w) w();
    else this.poked = true;
  }

  private sleep(ms: number): Promise<void> {
    if (this.poked) {
      this.poked = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private async loop(): Promise<void> {
    while (this.running) {
      const free = this.config.webhookConcurrency - this.inFlight;
      // Claim in batches: claiming whenever one slot frees up would cost one
      // statement per delivery (measured: 2,200/s instead of the batch rate).
      if (free < this.claimFloor) {
        await this.sleep(MAX_SLEEP_MS); // woken when an attempt finishes
        continue;
      }
      let claimed: ClaimedDelivery[] = [];
      // What was announced before this claim, the claim sees; a poke from now on is kept for the next sleep.
      this.poked = false;
      try {
        claimed = await claimDueDeliveries(this.db, Math.min(free, MAX_CLAIM), this.leaseMs);
      } catch (err) {
        this.log.error({ err }, 'claiming webhook deliveries failed; retrying');
        await this.sleep(1_000);
        continue;
      }
      for (const d of claimed) this.send(d);
      if (claimed.length === Math.min(free, MAX_CLAIM)) continue; // there may be more due right now
      let wait = MAX_SLEEP_MS;
      try {
        const s = await secondsUntilNextDue(this.db);
        if (s !== null) wait = Math.min(MAX_SLEEP_MS, Math.max(0, Math.ceil(s * 1000)));
      } catch {
        // the next loop's claim reports database trouble
      }
      if (wait > 0 && this.running) await this.sleep(wait);
    }
  }

  private send(d: ClaimedDelivery): void {
    this.inFlight++;
    if (d.payload === null) {
      // Its event row was deleted: nothing left to send.
      this.results.push(this.giveUp(d, 'the event of this delivery no longer exists'));
      this.scheduleFlush();
      this.inFlight--;
      return;
    }
    const envelope = d.payload;
    let keys: SigningKeys;
    try {
      keys = this.keysOf(d);
    } catch (err) {
      this.log.error({ err, delivery_id: d.id }, 'cannot decrypt webhook secret (was APP_SECRET changed?)');
      this.inFlight--;
      return;
    }
    attemptDelivery({
      agent: this.agent,
      allow: this.allow,
      url: d.url,
      keys,
      envelope,
      timeoutMs: this.config.webhookTimeoutMs,
      userAgent: `${this.config.serviceName}/1.0`,
    })
      .then((o) => {
        const attemptNo = d.sequence_attempts + 1;
        // The schedule counts from the start of the failed attempt, so a slow
        // receiver does not stretch it.
        const next = o.ok ? null : nextAttemptAt(attemptNo, d.max_attempts, this.config.webhookRetryDelays, o, o.at, this.config.retryJitter);
        this.results.push({
          id: d.id,
          webhook_id: d.webhook_id,
          lease: d.lease,
          at: o.at,
          status: o.ok ? 'success' : next ? 'pending' : 'failed',
          response_code: o.response_code,
          response_body: o.response_body,
          error: o.error,
          duration_ms: o.duration_ms,
          next_attempt_at: next,
          gone: o.gone,
        });
        this.scheduleFlush();
      })
      // attemptDelivery answers every network failure with an outcome, so this
      // is a bug of ours; unhandled, it would end the worker process and every
      // delivery in flight with it. The claim is left to its lease, which
      // expires and hands the delivery out again, as after a crash.
      .catch((err: unknown) => {
        this.log.error({ err, delivery_id: d.id }, 'webhook delivery attempt failed unexpectedly; retried when its lease expires');
      })
      .finally(() => {
        this.inFlight--;
        this.poke();
      });
  }

  private giveUp(d: ClaimedDelivery, error: string): AttemptResult {
    return {
      id: d.id, webhook_id: d.webhook_id, lease: d.lease, at: new Date(), status: 'failed', response_code: null,
      response_body: null, error, duration_ms: 0, next_attempt_at: null, gone: false,
    };
  }

  /** Signing keys per webhook, until its secret's ciphertext changes (enable issues a new one). */
  private keysOf(d: ClaimedDelivery): SigningKeys {
    const cached = this.keys.get(d.webhook_id);
    if (cached && cached.enc.equals(d.secret_enc)) return cached.keys;
    const keys = signingKeys(this.box.open(d.secret_enc));
    if (this.keys.size > 10_000) this.keys.clear();
    this.keys.set(d.webhook_id, { enc: d.secret_enc, keys });
    return keys;
  }

  private scheduleFlush(): void {
    if (this.results.length >= FLUSH_AT) {
      void this.flush();
      return;
    }
    this.flushTimer ??= setTimeout(() => void this.flush(), FLUSH_EVERY_MS);
  }

  /** Writes collected results; on a database error they are kept and retried. */
  flush(): Promise<void> {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    this.flushing = this.flushing.then(async () => {
      if (this.results.length === 0) return;
      const batch = this.results;
      this.results = [];
      try {
        await recordAttempts(this.db, batch);
        this.poke(); // retries may now be the next thing due
      } catch (err) {
        this.log.error({ err, count: batch.length }, 'recording webhook attempts failed; will retry');
        this.results = batch.concat(this.results);
        if (this.running) this.flushTimer ??= setTimeout(() => void this.flush(), 1_000);
      }
    });
    return this.flushing;
  }
}
