import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, createTestDatabase, makeTeam, type TestApp } from '../helpers.ts';
import { createDb, createPool } from '../../src/db/pool.ts';
import { buildApp } from '../../src/app.ts';
import { testConfig } from '../helpers.ts';

const METRICS_TOKEN = 'metrics-token-for-tests-0123456789';

describe('health, readiness and metrics', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp({ config: { intake: { ...testConfig().intake, metricsToken: METRICS_TOKEN } } });
  });
  after(() => t.close());

  test('/healthz answers without a key', async () => {
    const res = await t.app.inject({ url: '/healthz' });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { ok: true });
  });

  test('/readyz checks the database', async () => {
    const res = await t.app.inject({ url: '/readyz' });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { ok: true });
  });

  test('/metrics counts requests by route and status, with durations', async () => {
    const { key } = await makeTeam(t.database.db);
    await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } });
    await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } });
    await t.app.inject({ url: '/public/v1/ping' });
    const res = await t.app.inject({ url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
    assert.equal(res.statusCode, 200);
    assert.match(res.body, /http_requests_total\{method="GET",route="\/public\/v1\/ping",status_code="200"\} 2/);
    assert.match(res.body, /http_requests_total\{method="GET",route="\/public\/v1\/ping",status_code="401"\} 1/);
    assert.match(res.body, /http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/public\/v1\/ping",status_code="200"\}/);
  });

  test('/metrics without the token, or with a wrong one, is 401 and shows nothing', async () => {
    for (const authorization of [undefined, 'Bearer wrong-token-0123456789abcdef', `Basic ${METRICS_TOKEN}`, `Bearer ${METRICS_TOKEN}x`, METRICS_TOKEN]) {
      const res = await t.app.inject({ url: '/metrics', headers: authorization ? { authorization } : {} });
      assert.equal(res.statusCode, 401, String(authorization));
      assert.equal(res.json().error.code, 'UNAUTHORIZED');
      assert.doesNotMatch(res.body, /http_requests_total/);
    }
  });
});

test('/metrics is refused when METRICS_TOKEN is not set, whatever the request sends', async () => {
  const t = await buildTestApp();
  try {
    for (const authorization of [undefined, 'Bearer ', 'Bearer undefined', `Bearer ${METRICS_TOKEN}`]) {
      const res = await t.app.inject({ url: '/metrics', headers: authorization ? { authorization } : {} });
      assert.equal(res.statusCode, 401);
      assert.match(res.json().error.message, /METRICS_TOKEN/);
    }
  } finally {
    await t.close();
  }
});

test('/readyz is 503 when the database is unreachable', async () => {
  // A pool pointing at a port nothing listens on.
  const pool = createPool('postgres://nobody@127.0.0.1:1/none', 1);
  const app = await buildApp({ config: testConfig(), pool, db: createDb(pool) });
  try {
    const res = await app.inject({ url: '/readyz' });
    assert.equal(res.statusCode, 503);
    assert.equal(res.json().error.code, 'SERVICE_UNAVAILABLE');
  } finally {
    await app.close();
    await pool.end();
  }
});

test('a request that needs the database while it is down fails fast with 503', async () => {
  const pool = createPool('postgres://nobody@127.0.0.1:1/none', 1);
  const app = await buildApp({ config: testConfig(), pool, db: createDb(pool) });
  try {
    const res = await app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': 'plv_live_' + 'B'.repeat(43) } });
    assert.equal(res.statusCode, 503);
    assert.equal(res.json().error.code, 'SERVICE_UNAVAILABLE');
  } finally {
    await app.close();
    await pool.end();
  }
});

test('createTestDatabase gives each caller its own database', async () => {
  const a = await createTestDatabase();
  const b = await createTestDatabase();
  try {
    assert.notEqual(a.name, b.name);
    await makeTeam(a.db);
    const { rows } = await b.pool.query('SELECT count(*)::int AS n FROM teams');
    assert.equal(rows[0].n, 0);
  } finally {
    await a.drop();
    await b.drop();
  }
});
