import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
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
