// x-api-key authentication for /public/v1. Lookups are cached for a few
// seconds so auth costs a Map lookup on the hot path; the TTL bounds how long a
// revoked key keeps working in another process (decided: 5 s).
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { Db } from '../db/pool.ts';
import { hashApiKey, looksLikeApiKey } from './keys.ts';
import { findLiveKeyByHash, touchApiKey } from './queries.ts';
import { AppError } from '../lib/errors.ts';
import { leaveBodyUnread } from '../http/unread-body.ts';
import { hookError } from '../http/errors.ts';

export type Auth = { teamId: string; keyId: string };

declare module 'fastify' {
  interface FastifyRequest {
    auth: Auth | null;
  }
}

type Entry = { auth: Auth | null; expires: number; refreshAt: number };

/**
 * Lookups are single-flight per key, and a key in use is looked up again in
 * the background before its entry expires (from 80 % of the TTL), so the
 * requests of a busy key never wait for the database. Measured in
 * bench/isolation.ts: with the pool's connections held by another team's
 * work, each expiry made every request of that moment run its own lookup
 * (57 in 10 s), each waiting up to 785 ms for a connection. A revoked key still
 * stops working within the TTL: an entry is never used past `expires`.
 */
export class ApiKeyCache {
  private readonly entries = new Map<string, Entry>();
  private readonly loading = new Map<string, Promise<Auth | null>>();
  private readonly touched = new Map<string, number>();
  private readonly db: Db;
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  /** Bumped by invalidate(): a lookup begun before it does not store its (older) answer. */
  private generation = 0;
  /** Database lookups made (tests). */
  lookups = 0;
  constructor(db: Db, ttlMs = 5_000, maxEntries = 50_000) {
    this.db = db;
    this.ttlMs = ttlMs;
    this.maxEntries = maxEntries;
  }

  /**
   * The answer when it needs no database: a live cache entry, or null for a
   * value that cannot be a key. Undefined: resolve() must look it up.
   */
  peek(key: string): Auth | null | undefined {
    // Keyed by the key itself: hashing is only needed on a miss (the clear key
    // is in this process's memory during the request anyway). Only well-formed
    // keys are ever stored, so a hit needs no format check.
    const hit = this.entries.get(key);
    if (hit) {
      const now = Date.now();
      if (hit.expires > now) {
        if (hit.refreshAt <= now) this.lookup(key).catch(() => undefined);
        if (hit.auth) this.touch(hit.auth.keyId, now);
        return hit.auth;
      }
    }
    return looksLikeApiKey(key) ? undefined : null;
  }

  async resolve(key: string): Promise<Auth | null> {
    const known = this.peek(key);
    return known !== undefined ? known : this.load(key);
  }

  /** The database answer for a well-formed key peek() did not know. */
  async load(key: string): Promise<Auth | null> {
    const auth = await this.lookup(key);
    if (auth) this.touch(auth.keyId, Date.now());
    return auth;
  }

  private lookup(key: string): Promise<Auth | null> {
    const pending = this.loading.get(key);
    if (pending) return pending;
    const generation = this.generation;
    const p: Promise<Auth | null> = (async () => {
      this.lookups++;
      const row = await findLiveKeyByHash(this.db, hashApiKey(key));
      const auth = row ? { teamId: row.team_id, keyId: row.id } : null;
      if (generation === this.generation) {
        if (this.entries.size >= this.maxEntries) this.entries.clear();
        const now = Date.now();
        this.entries.set(key, { auth, expires: now + this.ttlMs, refreshAt: now + this.ttlMs * 0.8 });
      }
      return auth;
    })().finally(() => this.loading.get(key) === p && this.loading.delete(key));
    this.loading.set(key, p);
    return p;
  }

  /** Forget a key at once in this process (other processes within the TTL). */
  invalidate(keyId: string): void {
    this.generation++;
    this.loading.clear();
    for (const [id, e] of this.entries) if (e.auth?.keyId === keyId) this.entries.delete(id);
  }

  private touch(keyId: string, now: number): void {
    const last = this.touched.get(keyId) ?? 0;
    if (now - last < 60_000) return;
    this.touched.set(keyId, now);
    touchApiKey(this.db, keyId).catch(() => this.touched.delete(keyId));
  }
}

function keyOf(request: FastifyRequest): string | undefined {
  const header = request.headers['x-api-key'];
  const key = Array.isArray(header) ? header[0] : header;
  return key ? key.trim() : undefined;
}

/** Resolves the key (if any) early, so the rate limiter can key on it. */
export function resolveApiKey(cache: ApiKeyCache, request: FastifyRequest): Promise<void> {
  const key = keyOf(request);
  if (key === undefined) {
    request.auth = null;
    return Promise.resolve();
  }
  return cache.resolve(key).then((auth) => {
    request.auth = auth;
  });
}

/**
 * resolveApiKey as an onRequest hook in callback style: a cached key (nearly
 * every request) is resolved without a promise or a trip through the
 * microtask queue, which an async hook costs on every request. The body is a
 * block that returns nothing: a callback hook that also returned a promise
 * would move Fastify's chain on twice.
 */
export function resolveApiKeyHook(cache: ApiKeyCache) {
  return (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const key = keyOf(request);
    const known = key === undefined ? null : cache.peek(key);
    if (known !== undefined) {
      request.auth = known;
      done();
      return;
    }
    cache.load(key!).then(
      (auth) => {
        request.auth = auth;
        done();
      },
      (err: unknown) => done(hookError(err)),
    );
  };
}

export function requireApiKey(app: FastifyInstance): void {
  // preParsing: after the rate limiter (route onRequest), before the body is read,
  // so an unauthenticated request never gets a validation error instead of a 401.
  // Callback style: an authenticated request passes without a promise. A
  // throw here is answered as a rejected async hook would be.
  app.addHook('preParsing', (request, reply, _payload, done) => {
    if (request.auth) {
      done();
      return;
    }
    leaveBodyUnread(request, reply);
    const given = request.headers['x-api-key'] !== undefined;
    throw new AppError('UNAUTHORIZED', given ? 'invalid or revoked API key' : 'missing API key: send it in the x-api-key header');
  });
}
