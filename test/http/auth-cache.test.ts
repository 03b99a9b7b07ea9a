// The API-key cache under load: one database lookup for many concurrent
// requests of one key, and a key in use refreshed before its entry expires,
// so its requests never wait for the database (bench/isolation.ts measured
// 57 lookups in 10 s, each up to 785 ms, while another team held the pool's
// connections). Revocation still takes effect within the TTL.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ApiKeyCache } from '../../src/teams/auth.ts';
import { revokeApiKey } from '../../src/teams/queries.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

let database: TestDatabase;
before(async () => {
  database = await createTestDatabase();
});
after(() => database.drop());
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('concurrent requests of one uncached key make one lookup', async () => {
  const { key, teamId } = await makeTeam(database.db);
  const cache = new ApiKeyCache(database.db, 60_000);
  const answers = await Promise.all(Array.from({ length: 50 }, () => cache.resolve(key)));
  assert.equal(cache.lookups, 1);
  for (const a of answers) assert.equal(a?.teamId, teamId);
});

test('a key in use is refreshed in the background before expiry: no request waits for a lookup', async () => {
  const { key } = await makeTeam(database.db);
  const ttl = 1_000;
  const cache = new ApiKeyCache(database.db, ttl);
  await cache.resolve(key);
  let waited = 0;
  const until = Date.now() + 3 * ttl;
  while (Date.now() < until) {
    const inFlight = cache.resolve(key);
    // An answer from the entry settles in this turn's microtasks; one that waits for the database does not.
    let settled = false;
    void inFlight.then(() => (settled = true));
    await Promise.resolve();
    await Promise.resolve();
    if (!settled) waited++;
    await inFlight;
    await sleep(50);
  }
  assert.equal(waited, 0, 'a request waited for a lookup');
  assert.ok(cache.lookups >= 3, `refreshed ${cache.lookups - 1} times in 3 TTLs`);
});

test('a revoked key is refused within the TTL even while it is in constant use', async () => {
  const { key, keyId, teamId } = await makeTeam(database.db);
  const ttl = 500;
  const cache = new ApiKeyCache(database.db, ttl);
  assert.equal((await cache.resolve(key))?.teamId, teamId);
  await revokeApiKey(database.db, keyId, teamId);
  const revokedAt = Date.now();
  let refused = false;
  while (!refused && Date.now() - revokedAt < 4 * ttl) {
    const asked = Date.now();
    const auth = await cache.resolve(key);
    // Accepted only from an entry looked up before the revocation, so only while it is fresh.
    if (auth) assert.ok(asked - revokedAt < ttl, `accepted ${asked - revokedAt} ms after revocation`);
    refused = auth === null;
    await sleep(20);
  }
  assert.ok(refused, 'still accepted after 4 TTLs');
});
