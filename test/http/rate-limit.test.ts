import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { LeasedRedisStore, MAX_LEASE } from '../../src/http/rate-limit-store.ts';
import { buildTestApp, createTestDatabase, makeTeam, type TestApp, type TestDatabase } from '../helpers.ts';

const ping = (t: TestApp, key?: string, ip = '127.0.0.1') =>
  t.app.inject({ url: '/public/v1/ping', headers: key ? { 'x-api-key': key } : {}, remoteAddress: ip });

function assertLimited(res: Awaited<ReturnType<typeof ping>>, limit: number) {
  assert.equal(res.statusCode, 429);
  const body = res.json();
  assert.equal(body.ok, false);
  assert.equal(body.error.code, 'RATE_LIMITED');
  const retryAfter = Number(res.headers['retry-after']);
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${res.headers['retry-after']}`);
  assert.equal(res.headers['x-ratelimit-limit'], String(limit));
  assert.equal(res.headers['x-ratelimit-remaining'], '0');
  assert.ok(Number(res.headers['x-ratelimit-reset']) >= 1);
}

describe('rate limits, in memory', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp({ config: { rateLimitPerMinute: 3 } });
  });
  after(() => t.close());

  test('per API key: the 4th request in a minute is 429 with Retry-After and headers', async () => {
    const { key } = await makeTeam(t.database.db);
    const remaining: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await ping(t, key);
      assert.equal(res.statusCode, 200);
      assert.equal(res.headers['x-ratelimit-limit'], '3');
      remaining.push(String(res.headers['x-ratelimit-remaining']));
    }
    assert.deepEqual(remaining, ['2', '1', '0']);
    assertLimited(await ping(t, key), 3);
  });

  test('another key of the same client IP has its own budget', async () => {
    const a = await makeTeam(t.database.db);
    const b = await makeTeam(t.database.db);
    for (let i = 0; i < 3; i++) assert.equal((await ping(t, a.key, '10.9.9.9')).statusCode, 200);
    assert.equal((await ping(t, a.key, '10.9.9.9')).statusCode, 429);
    assert.equal((await ping(t, b.key, '10.9.9.9')).statusCode, 200);
  });

  test("a valid key's unknown path and wrong method count against the key's budget, not the client IP's", async () => {
    const { key } = await makeTeam(t.database.db);
    assert.equal((await ping(t, key, '10.7.7.1')).statusCode, 200);
    const nope = await t.app.inject({ url: '/public/v1/nope', headers: { 'x-api-key': key }, remoteAddress: '10.7.7.2' });
    assert.equal(nope.statusCode, 404);
    assert.equal(nope.headers['x-ratelimit-remaining'], '1');
    const wrong = await t.app.inject({ method: 'DELETE', url: '/public/v1/ping', headers: { 'x-api-key': key }, remoteAddress: '10.7.7.3' });
    assert.equal(wrong.statusCode, 405);
    assertLimited(await ping(t, key, '10.7.7.4'), 3);
    // Those addresses' own budgets are untouched.
    assert.equal((await ping(t, undefined, '10.7.7.2')).headers['x-ratelimit-remaining'], '2');
  });

  test('requests without a valid key are limited per client IP', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await ping(t, undefined, '10.1.1.1')).statusCode, 401);
    assertLimited(await ping(t, 'wrong-key', '10.1.1.1'), 3);
    assert.equal((await ping(t, undefined, '10.1.1.2')).statusCode, 401);
  });
});

describe('rate limits, shared through Redis', () => {
  let db: TestDatabase;
  let redisA: Redis;
  let redisB: Redis;
  let a: TestApp;
  let b: TestApp;
  before(async () => {
    db = await createTestDatabase();
    const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
    redisA = new Redis(url, { maxRetriesPerRequest: 1 });
    redisB = new Redis(url, { maxRetriesPerRequest: 1 });
    // Two app instances on one database and one Redis: two API processes.
    a = await buildTestApp({ database: db, config: { rateLimitPerMinute: 4 }, deps: { redis: redisA } });
    b = await buildTestApp({ database: db, config: { rateLimitPerMinute: 4 }, deps: { redis: redisB } });
  });
  after(async () => {
    await a.close();
    await b.close();
    redisA.disconnect();
    redisB.disconnect();
    await db.drop();
  });

  test('the limit holds across processes', async () => {
    const { key } = await makeTeam(db.db);
    assert.equal((await ping(a, key)).statusCode, 200);
    assert.equal((await ping(b, key)).statusCode, 200);
    assert.equal((await ping(a, key)).statusCode, 200);
    const fourth = await ping(b, key);
    assert.equal(fourth.statusCode, 200);
    assert.equal(fourth.headers['x-ratelimit-remaining'], '0');
    assertLimited(await ping(a, key), 4);
    assertLimited(await ping(b, key), 4);
  });

  test('the counter lives in Redis under our namespace', async () => {
    const { key, keyId } = await makeTeam(db.db);
    await ping(a, key);
    const keys = await redisA.keys(`plover:rl:*${keyId}*`);
    assert.equal(keys.length, 1);
  });

  test('per-IP limiting for unauthenticated requests is shared too', async () => {
    const ip = `10.${randomBytes(1)[0]}.${randomBytes(1)[0]}.7`;
    for (let i = 0; i < 2; i++) {
      assert.equal((await ping(a, undefined, ip)).statusCode, 401);
      assert.equal((await ping(b, undefined, ip)).statusCode, 401);
    }
    assertLimited(await ping(a, undefined, ip), 4);
  });
});

/** Counts the commands a connection sends from now on. */
function countCommands(redis: Redis): { readonly n: number } {
  const counter = { n: 0 };
  const send = redis.sendCommand.bind(redis);
  redis.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
    counter.n++;
    return send(...args);
  }) as Redis['sendCommand'];
  return counter;
}

describe('rate limits through Redis, taken in leases', () => {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  let db: TestDatabase;
  let redisA: Redis;
  let redisB: Redis;
  let a: TestApp;
  let b: TestApp;
  before(async () => {
    db = await createTestDatabase();
    redisA = new Redis(url, { maxRetriesPerRequest: 1 });
    redisB = new Redis(url, { maxRetriesPerRequest: 1 });
    a = await buildTestApp({ database: db, config: { rateLimitPerMinute: 1000 }, deps: { redis: redisA } });
    b = await buildTestApp({ database: db, config: { rateLimitPerMinute: 1000 }, deps: { redis: redisB } });
  });
  after(async () => {
    await a.close();
    await b.close();
    redisA.disconnect();
    redisB.disconnect();
    await db.drop();
  });

  test('a busy key asks Redis a few times, not once a request, and one process counts it exactly', async () => {
    const { key, keyId } = await makeTeam(db.db);
    const commands = countCommands(redisA);
    const remaining: number[] = [];
    for (let i = 0; i < 300; i++) {
      const res = await ping(a, key);
      assert.equal(res.statusCode, 200);
      remaining.push(Number(res.headers['x-ratelimit-remaining']));
    }
    assert.deepEqual(remaining, Array.from({ length: 300 }, (_, i) => 999 - i));
    // Leases of 1, 2, 4, ... 64 tokens: 1+2+...+64 = 127, then 64 each: 10. A
    // stall of over a second on a loaded machine restarts the sizes at 1 (about 6
    // more); one a request (the library's store) is 300.
    assert.ok(commands.n >= 7 && commands.n <= 30, `${commands.n} Redis commands for 300 requests`);
    const [counter] = await redisA.keys(`plover:rl:*${keyId}*`);
    const shared = Number(await redisA.get(counter!));
    assert.ok(shared >= 300 && shared < 300 + MAX_LEASE, `shared counter ${shared}`);
  });

  test('two processes together never let more than the limit through', async () => {
    const limited = await buildTestApp({ database: db, config: { rateLimitPerMinute: 50 }, deps: { redis: redisA } });
    const other = await buildTestApp({ database: db, config: { rateLimitPerMinute: 50 }, deps: { redis: redisB } });
    try {
      const { key } = await makeTeam(db.db);
      const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => ping(i % 2 ? limited : other, key)));
      const codes = answers.map((r) => r.statusCode);
      // Each process had more requests than the limit, so every token it leased was used.
      assert.equal(codes.filter((c) => c === 200).length, 50);
      assert.equal(codes.filter((c) => c === 429).length, 150);
      for (const r of answers.filter((r) => r.statusCode === 429)) assertLimited(r, 50);
    } finally {
      await limited.close();
      await other.close();
    }
  });

  test('a window used up is answered 429 from memory, without Redis', async () => {
    const limited = await buildTestApp({ database: db, config: { rateLimitPerMinute: 20 }, deps: { redis: redisA } });
    try {
      const { key } = await makeTeam(db.db);
      for (let i = 0; i < 20; i++) assert.equal((await ping(limited, key)).statusCode, 200);
      assertLimited(await ping(limited, key), 20);
      const commands = countCommands(redisA);
      for (let i = 0; i < 100; i++) assertLimited(await ping(limited, key), 20);
      assert.equal(commands.n, 0);
    } finally {
      await limited.close();
    }
  });

  test('Redis unreachable: requests pass (the limiter fails open)', async () => {
    const down = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true, retryStrategy: () => null });
    down.on('error', () => {});
    const t = await buildTestApp({ database: db, config: { rateLimitPerMinute: 2 }, deps: { redis: down } });
    try {
      const { key } = await makeTeam(db.db);
      for (let i = 0; i < 5; i++) assert.equal((await ping(t, key)).statusCode, 200);
    } finally {
      await t.close();
      down.disconnect();
    }
  });
});

describe('the leased store itself', () => {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  let redis: Redis;
  before(() => {
    redis = new Redis(url, { maxRetriesPerRequest: 1 });
  });
  after(() => redis.disconnect());
  const incr = (store: LeasedRedisStore, key: string, windowMs: number, max: number) =>
    new Promise<{ current: number; ttl: number }>((resolve, reject) => store.incr(key, (err, r) => (err ? reject(err) : resolve(r!)), windowMs, max));

  test('a new window starts when the key expires', async () => {
    const store = new LeasedRedisStore(redis, `plover:test:rl:${randomBytes(6).toString('hex')}:`);
    const seen: number[] = [];
    for (let i = 0; i < 4; i++) seen.push((await incr(store, 'k', 1_500, 3)).current);
    assert.deepEqual(seen, [1, 2, 3, 4]);
    await new Promise((r) => setTimeout(r, 1_600));
    const next = await incr(store, 'k', 1_500, 3);
    assert.equal(next.current, 1);
    assert.ok(next.ttl > 0 && next.ttl <= 1_500, `ttl ${next.ttl}`);
  });

  test('many requests of one key at once: one lease at a time, every count given once', async () => {
    const store = new LeasedRedisStore(redis, `plover:test:rl:${randomBytes(6).toString('hex')}:`);
    const commands = countCommands(redis);
    const results = await Promise.all(Array.from({ length: 1000 }, () => incr(store, 'k', 60_000, 10_000)));
    const counts = results.map((r) => r.current).sort((x, y) => x - y);
    assert.deepEqual(counts, Array.from({ length: 1000 }, (_, i) => i + 1));
    // 1 + 2 + ... + 64 = 127, then leases of 64: 21 for 1,000 (a stall of over a second restarts the sizes).
    assert.ok(commands.n <= 40, `${commands.n} leases for 1,000 requests`);
  });

  test('a lease that fails fails the requests waiting for it, at once', async () => {
    const down = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true, retryStrategy: () => null });
    down.on('error', () => {});
    try {
      const warnings: string[] = [];
      const store = new LeasedRedisStore(down, 'plover:test:rl:down:', { log: { warn: (_obj, msg) => warnings.push(msg) } });
      const commands = countCommands(down);
      const results = await Promise.allSettled(Array.from({ length: 200 }, () => incr(store, 'k', 60_000, 1_000)));
      assert.ok(results.every((r) => r.status === 'rejected'));
      // One failed lease for all of them, not one after another for each.
      assert.equal(commands.n, 1);
      // Said once (the limiter lets these requests through without a word of its own).
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!, /Redis did not answer/);
    } finally {
      down.disconnect();
    }
  });

  test('keys remembered are capped; a key in use is kept, the least recently used goes', async () => {
    const store = new LeasedRedisStore(redis, `plover:test:rl:${randomBytes(6).toString('hex')}:`, { maxKeys: 50 });
    for (let i = 0; i < 40; i++) await incr(store, 'busy', 5_000, 1_000);
    const commands = countCommands(redis);
    for (let i = 0; i < 120; i++) {
      await incr(store, `ip:${i}`, 5_000, 10);
      await incr(store, 'busy', 5_000, 1_000);
    }
    assert.equal(store.size, 50);
    // Counted exactly: never evicted, so no leased token was lost.
    assert.equal((await incr(store, 'busy', 5_000, 1_000)).current, 161);
    // 120 new keys, one lease each; "busy" (leases of 32 and 64 by now) only a few.
    assert.ok(commands.n <= 140, `${commands.n} Redis commands`);
  });

  test('a key quiet for over a second goes back to leases of one token', async () => {
    const prefix = `plover:test:rl:${randomBytes(6).toString('hex')}:`;
    const store = new LeasedRedisStore(redis, prefix);
    // Busy: leases of 1, 2, 4, 8, 16 (31 tokens), then one of 32 for the 32nd request.
    for (let i = 0; i < 32; i++) await incr(store, 'k', 60_000, 100_000);
    assert.equal(await redis.get(`${prefix}k`), String(31 + 32));
    for (let i = 32; i < 63; i++) await incr(store, 'k', 60_000, 100_000); // the lease used up
    await new Promise((r) => setTimeout(r, 1_100));
    assert.equal((await incr(store, 'k', 60_000, 100_000)).current, 64);
    // One token leased, not 64: the shared counter moved by one.
    assert.equal(await redis.get(`${prefix}k`), '64');
  });

  test('eviction passes over keys whose lease is on its way', async () => {
    const held = new Redis(url, { maxRetriesPerRequest: 1 });
    try {
      const store = new LeasedRedisStore(held, `plover:test:rl:${randomBytes(6).toString('hex')}:`, { maxKeys: 3 });
      // Leases of "a" and "b" wait until released; others go through.
      const client = held as unknown as { ploverRateLease: (k: string, n: number, w: number) => Promise<[number, number]> };
      const real = client.ploverRateLease.bind(held);
      const gates: (() => void)[] = [];
      client.ploverRateLease = (k, n, w) =>
        /:(a|b)$/.test(k) ? new Promise<void>((r) => gates.push(r)).then(() => real(k, n, w)) : real(k, n, w);
      const a = incr(store, 'a', 60_000, 10);
      const b = incr(store, 'b', 60_000, 10);
      await incr(store, 'c', 60_000, 10);
      // Full (a, b, c): d evicts the least recently used without a lease on its way, c.
      await incr(store, 'd', 60_000, 10);
      assert.deepEqual(['a', 'b', 'c', 'd'].map((k) => store.has(k)), [true, true, false, true]);
      for (const open of gates) open();
      assert.deepEqual([(await a).current, (await b).current], [1, 1]);
    } finally {
      held.disconnect();
    }
  });

  test("a route's store (createRateLimit) uses @fastify/rate-limit's key names", async () => {
    const prefix = `plover:test:rl:${randomBytes(6).toString('hex')}:`;
    // RedisStore.child: `${key}${routeInfo.method}${routeInfo.url}-`, and createRateLimit() passes routeInfo {}.
    const child = new LeasedRedisStore(redis, prefix).child({ routeInfo: {} });
    await incr(child, 'signin-ip:10.0.0.1', 5_000, 10);
    assert.deepEqual(await redis.keys(`${prefix}*`), [`${prefix}undefinedundefined-signin-ip:10.0.0.1`]);
    const route = new LeasedRedisStore(redis, prefix).child({ routeInfo: { method: 'POST', url: '/x' } });
    await incr(route, 'k', 5_000, 10);
    assert.equal(await redis.get(`${prefix}POST/x-k`), '1');
  });

  test('options it does not implement are refused, not ignored', () => {
    assert.throws(() => new LeasedRedisStore(redis, 'p:').child({ continueExceeding: true, routeInfo: {} }), /not supported/);
    assert.throws(() => new LeasedRedisStore(redis, 'p:').child({ exponentialBackoff: true, routeInfo: {} }), /not supported/);
  });
});
