// The rate limiter's store when REDIS_URL is set: Redis's fixed-window counters
// (one per API key or client IP and window, shared by every API process), taken
// in leases instead of one Redis round trip per request.
//
// @fastify/rate-limit's own Redis store runs a script on every request; on the
// API's cheapest route that cost a third of its throughput (`npm run bench --
// ping` on a 2-core machine with Redis on it: 59,900-63,700 requests/s without
// Redis, 38,500-40,800 with that store, 58,100-62,000 with this one). Here a
// process takes tokens from the shared counter with INCRBY n and answers the
// next n - 1 requests of that key from memory:
//
// - Never more than `max` requests pass in one window, all processes together:
//   a lease gives out only the tokens that fall at or under `max` in the shared
//   counter.
// - A window this process saw used up answers 429 from memory until it ends
//   (the shared count only grows within a window).
// - A lease is one token until a key's previous lease was used up within a
//   second (a busy key); then it doubles, up to MAX_LEASE, and never exceeds an
//   eighth of what the window had left as far as this process knows (but is at
//   least one). Tokens one process leased and did not use count against the
//   others until the window ends, so a key spread over several processes can be
//   refused up to MAX_LEASE - 1 requests per other process short of its limit.
//   With one process, counts and X-RateLimit-Remaining are exact (as long as
//   the key is not evicted: MAX_KEYS).
//
// The counter keys and their expiry are those of @fastify/rate-limit's Redis
// store (same names, INCRBY on the same integer), so processes of the previous
// version share counters with these during a rolling upgrade.
import type { Redis } from 'ioredis';

/** Where a failed lease is reported (a pino logger's warn). */
export type WarnLog = { warn(obj: object, msg: string): void };

type Result = { current: number; ttl: number };
type Callback = (err: Error | null, result?: Result) => void;

/** Largest lease in tokens. */
export const MAX_LEASE = 64;
/** A lease used up within this many ms marks a busy key: the next one is twice as large. */
const BUSY_MS = 1_000;
/**
 * Keys remembered per store (one for the API's limit, one per createRateLimit():
 * sign-in and bad tracking links); beyond it the least recently used goes. An
 * evicted key loses its unused leased tokens (they stay counted in Redis for the
 * rest of the window) and its used-up state (its next request asks Redis again).
 * When the 16 least recently used all have a lease on its way, the first goes
 * anyway: a request for it then takes a second lease beside the first (tokens
 * lost, never extra ones).
 */
export const MAX_KEYS = 20_000;
/** How far eviction looks past keys whose lease is on its way. */
const EVICTION_SCAN = 16;
/**
 * A failed lease is logged at most this often: @fastify/rate-limit's skipOnError
 * lets the request through without a word, so an outage (or a READONLY replica
 * after a failover) would otherwise switch the limits off silently.
 */
const ERROR_LOG_EVERY_MS = 10_000;

const LEASE = `
local n = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local count = redis.call('INCRBY', KEYS[1], n)
local ttl
if count == n then
  redis.call('PEXPIRE', KEYS[1], window)
  ttl = window
else
  ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 then
    redis.call('PEXPIRE', KEYS[1], window)
    ttl = window
  end
end
return {count, ttl}
`;

type LeaseClient = { ploverRateLease(key: string, n: number, windowMs: number): Promise<[number, number]> };

type Entry = {
  /** When the window ends (ms, performance.now(): a step of the wall clock moves no window). Never later than the key's expiry in Redis. */
  end: number;
  /** The window's count as of this process's last lease, plus this process's requests since. */
  current: number;
  /** Leased tokens not used yet. */
  left: number;
  /** Size of the next lease. */
  size: number;
  /** When the last lease came back (0: none yet). */
  leasedAt: number;
  /** The lease on its way; requests that find no token wait for it. */
  pending: Promise<Result> | null;
};

export class LeasedRedisStore {
  private readonly entries = new Map<string, Entry>();
  private readonly client: LeaseClient;
  private readonly redis: Redis;
  private readonly prefix: string;
  private readonly maxKeys: number;
  private readonly log: WarnLog | undefined;
  private loggedAt = -Infinity;

  constructor(redis: Redis, prefix: string, opts: { maxKeys?: number; log?: WarnLog } = {}) {
    this.redis = redis;
    this.prefix = prefix;
    this.maxKeys = opts.maxKeys ?? MAX_KEYS;
    this.log = opts.log;
    if (!(redis as unknown as Partial<LeaseClient>).ploverRateLease) redis.defineCommand('ploverRateLease', { numberOfKeys: 1, lua: LEASE });
    this.client = redis as unknown as LeaseClient;
  }

  /** @fastify/rate-limit's store interface: count one request of `key`. */
  incr(key: string, cb: Callback, timeWindow: number, max: number): void {
    const k = this.prefix + key;
    const hit = this.fromMemory(k, max);
    if (hit) {
      cb(null, hit);
      return;
    }
    this.lease(k, timeWindow, max).then(
      (r) => cb(null, r),
      (err: unknown) => {
        const error = err instanceof Error ? err : new Error(String(err));
        const now = performance.now();
        if (this.log && now - this.loggedAt >= ERROR_LOG_EVERY_MS) {
          this.loggedAt = now;
          this.log.warn({ err: error.message }, 'rate limiter: Redis did not answer; requests pass unlimited until it does');
        }
        cb(error);
      },
    );
  }

  /** @fastify/rate-limit's store interface: the store of a route with options of its own. */
  child(routeOptions: object): LeasedRedisStore {
    // The same key names as @fastify/rate-limit's Redis store (see the top of this
    // file). Its types say route options; what it passes is its merged parameters,
    // which carry them as `routeInfo` ({} for createRateLimit()).
    const params = routeOptions as LimiterParams & { routeInfo?: { method?: string; url?: string } };
    refuseUnsupported(params);
    const info = params.routeInfo ?? {};
    return new LeasedRedisStore(this.redis, `${this.prefix}${info.method}${info.url}-`, { maxKeys: this.maxKeys, log: this.log });
  }

  /** Keys remembered (tests). */
  get size(): number {
    return this.entries.size;
  }

  /** Whether a key (as given to incr) is remembered (tests). */
  has(key: string): boolean {
    return this.entries.has(this.prefix + key);
  }

  /** A request answered from this process's memory, or null when Redis must be asked. */
  private fromMemory(k: string, max: number): Result | null {
    const e = this.entries.get(k);
    if (!e) return null;
    const now = performance.now();
    if (now >= e.end) return null;
    // A leased token, or a window used up (every later request of it is over
    // the limit, whoever counts it); otherwise Redis is asked.
    if (e.left > 0) e.left--;
    else if (e.current < max) return null;
    e.current++;
    this.touch(k, e);
    return { current: e.current, ttl: Math.ceil(e.end - now) };
  }

  /** Moves a key to the young end of the map: eviction takes the least recently used. */
  private touch(k: string, e: Entry): void {
    this.entries.delete(k);
    this.entries.set(k, e);
  }

  /** Makes room for one key: the least recently used without a lease on its way (its tokens are lost). */
  private evictOne(): void {
    let oldest: string | undefined;
    let scanned = 0;
    for (const [k, e] of this.entries) {
      oldest ??= k;
      if (!e.pending) {
        this.entries.delete(k);
        return;
      }
      if (++scanned >= EVICTION_SCAN) break;
    }
    if (oldest !== undefined) this.entries.delete(oldest);
  }

  private async lease(k: string, windowMs: number, max: number): Promise<Result> {
    for (;;) {
      let e = this.entries.get(k);
      if (e?.pending) {
        // One lease at a time per key: wait for it (its failure is this request's
        // too), then take a token from it if one is left.
        await e.pending;
        const hit = this.fromMemory(k, max);
        if (hit) return hit;
        continue;
      }
      const now = performance.now();
      if (!e) {
        if (this.entries.size >= this.maxKeys) this.evictOne();
        e = { end: 0, current: 0, left: 0, size: 1, leasedAt: 0, pending: null };
      }
      this.touch(k, e);
      if (now >= e.end) {
        e.current = 0;
        e.left = 0;
      }
      // A lease used up within BUSY_MS: twice as many next time; otherwise one.
      e.size = e.leasedAt > 0 && now - e.leasedAt < BUSY_MS ? Math.min(e.size * 2, MAX_LEASE) : 1;
      const n = Math.max(1, Math.min(e.size, Math.floor((max - e.current) / 8)));
      const entry = e;
      const pending = this.client.ploverRateLease(k, n, windowMs).then(([count, ttl]) => {
        const first = count - n + 1;
        // `now` was read before the script ran: the local end is never after the key's expiry.
        entry.end = now + ttl;
        entry.leasedAt = performance.now();
        entry.current = first;
        // The tokens at or under max are ours to give; the first goes to this request.
        entry.left = first > max ? 0 : Math.min(n, max - first + 1) - 1;
        return { current: first, ttl: Math.max(1, Math.ceil(entry.end - entry.leasedAt)) };
      });
      e.pending = pending;
      try {
        return await pending;
      } finally {
        if (entry.pending === pending) entry.pending = null;
      }
    }
  }
}

type LimiterParams = { continueExceeding?: boolean; exponentialBackoff?: boolean };

/** Options of @fastify/rate-limit this store does not implement: refused at start rather than ignored. */
function refuseUnsupported(params: LimiterParams | undefined): void {
  if (params?.continueExceeding || params?.exponentialBackoff) {
    throw new Error('LeasedRedisStore: continueExceeding and exponentialBackoff are not supported');
  }
}

/** The store class @fastify/rate-limit instantiates (`store` option), bound to one Redis connection. */
export function leasedRedisStore(redis: Redis, prefix: string, log?: WarnLog): new (params?: LimiterParams) => LeasedRedisStore {
  return class extends LeasedRedisStore {
    constructor(params?: LimiterParams) {
      refuseUnsupported(params);
      super(redis, prefix, { log });
    }
  };
}
