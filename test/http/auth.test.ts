import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { revokeApiKey } from '../../src/teams/queries.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

describe('x-api-key authentication', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp({ deps: { keyCacheTtlMs: 200 } });
  });
  after(() => t.close());

  test('a valid key: ping answers {ok: true}', async () => {
    const { key } = await makeTeam(t.database.db);
    const res = await t.app.inject({ method: 'GET', url: '/public/v1/ping', headers: { 'x-api-key': key } });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { ok: true });
  });

  for (const [name, headers] of [
    ['missing', {}],
    ['empty', { 'x-api-key': '' }],
    ['unknown (well-formed)', { 'x-api-key': 'plv_live_' + 'A'.repeat(43) }],
    ['garbage', { 'x-api-key': 'not a key at all' }],
  ] as const) {
    test(`a ${name} key is 401 with the error object`, async () => {
      const res = await t.app.inject({ method: 'GET', url: '/public/v1/ping', headers });
      assert.equal(res.statusCode, 401);
      const body = res.json();
      assert.equal(body.ok, false);
      assert.equal(body.error.code, 'UNAUTHORIZED');
      assert.equal(typeof body.error.message, 'string');
    });
  }

  test('401 comes before body validation and never reveals routes', async () => {
    const res = await t.app.inject({
      method: 'GET',
      url: '/public/v1/ping',
      headers: { 'x-api-key': 'wrong', 'content-type': 'application/json' },
      payload: '{not json',
    });
    assert.equal(res.statusCode, 401);
  });

  test('a revoked key is refused once the cache TTL has passed (another process revoked it)', async () => {
    const { key, keyId } = await makeTeam(t.database.db);
    const ok = await t.app.inject({ method: 'GET', url: '/public/v1/ping', headers: { 'x-api-key': key } });
    assert.equal(ok.statusCode, 200);
    // Revoke behind the app's back, as the CLI or another API process would.
    assert.equal(await revokeApiKey(t.database.db, keyId), true);
    await new Promise((r) => setTimeout(r, 250));
    const res = await t.app.inject({ method: 'GET', url: '/public/v1/ping', headers: { 'x-api-key': key } });
    assert.equal(res.statusCode, 401);
    assert.equal(res.json().error.code, 'UNAUTHORIZED');
  });

  test('a key revoked in this process is refused at once', async () => {
    const { key, keyId } = await makeTeam(t.database.db);
    assert.equal((await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } })).statusCode, 200);
    await revokeApiKey(t.database.db, keyId);
    t.app.apiKeys.invalidate(keyId);
    assert.equal((await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } })).statusCode, 401);
  });

  test('last_used_at is set on use and written at most once a minute', async () => {
    const { key, keyId } = await makeTeam(t.database.db);
    const read = async () =>
      (await t.database.db.selectFrom('api_keys').select('last_used_at').where('id', '=', keyId).executeTakeFirstOrThrow()).last_used_at;
    assert.equal(await read(), null);
    await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } });
    let first: Date | null = null;
    for (let i = 0; i < 50 && !first; i++) {
      await new Promise((r) => setTimeout(r, 20));
      first = await read();
    }
    assert.ok(first instanceof Date, 'last_used_at was set');
    await new Promise((r) => setTimeout(r, 250)); // past the cache TTL: a fresh lookup
    for (let i = 0; i < 5; i++) await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await read())!.getTime(), first.getTime());
  });

  test('keys are stored hashed: the key text is nowhere in the table', async () => {
    const { key, keyId } = await makeTeam(t.database.db);
    const { rows } = await t.database.pool.query('SELECT to_jsonb(k)::text AS row FROM api_keys k WHERE id = $1', [keyId]);
    assert.equal(rows.length, 1);
    assert.ok(!rows[0].row.includes(key.slice(9)), 'the secret part of the key is not stored');
  });
});
