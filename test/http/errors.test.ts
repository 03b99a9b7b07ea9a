import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Writable } from 'node:stream';
import pino from 'pino';
import { Type } from 'typebox';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { detailsFromAjv } from '../../src/lib/errors.ts';

function assertError(res: { statusCode: number; json(): any; headers: Record<string, unknown> }, status: number, code: string) {
  assert.equal(res.statusCode, status, `status ${res.statusCode}: ${JSON.stringify(res.json())}`);
  const body = res.json();
  assert.equal(body.ok, false);
  assert.equal(body.error.code, code);
  assert.equal(typeof body.error.message, 'string');
  assert.match(String(res.headers['x-request-id']), /^[0-9a-f-]{36}$/);
  return body;
}

describe('error envelope and status codes', () => {
  let t: TestApp;
  let key: string;
  const logLines: string[] = [];
  const logStream = new Writable({
    write(chunk, _enc, cb) {
      logLines.push(String(chunk));
      cb();
    },
  });
  before(async () => {
    t = await buildTestApp({
      // /__test/echo is outside /public/v1: it takes the dashboard class's limit.
      config: { intake: { ...testConfig().intake, dashboardBodyLimitBytes: 2048 } },
      deps: { logger: pino({ level: 'error' }, logStream) },
      beforeReady(app) {
        // Test-only routes, on the same app and hooks as real ones.
        app.get('/__test/boom', async () => {
          throw new Error('secret internal detail: password=hunter2');
        });
        app.post(
          '/__test/echo',
          {
            schema: {
              body: Type.Object(
                {
                  name: Type.String({ minLength: 1 }),
                  items: Type.Array(Type.Object({ email: Type.String({ format: 'email' }), n: Type.Integer() }), { maxItems: 5 }),
                },
                { additionalProperties: false },
              ),
            },
          },
          async (request) => ({ ok: true, got: request.body }),
        );
      },
    });
    ({ key } = await makeTeam(t.database.db));
  });
  after(() => t.close());

  test('unknown route: 404 NOT_FOUND', async () => {
    assertError(await t.app.inject({ url: '/public/v1/nope', headers: { 'x-api-key': key } }), 404, 'NOT_FOUND');
    assertError(await t.app.inject({ url: '/elsewhere' }), 404, 'NOT_FOUND');
  });

  test('unknown /public/v1 path still carries the rate-limit headers', async () => {
    const res = await t.app.inject({ url: '/public/v1/nope', headers: { 'x-api-key': key } });
    assert.ok(res.headers['x-ratelimit-limit']);
    assert.ok(res.headers['x-ratelimit-remaining']);
  });

  test('wrong method: 405 METHOD_NOT_ALLOWED with Allow', async () => {
    const res = await t.app.inject({ method: 'DELETE', url: '/public/v1/ping', headers: { 'x-api-key': key } });
    assertError(res, 405, 'METHOD_NOT_ALLOWED');
    assert.match(String(res.headers.allow), /GET/);
  });

  test('body too large: 413 PAYLOAD_TOO_LARGE', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/__test/echo',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'x'.repeat(5000), items: [] }),
    });
    assertError(res, 413, 'PAYLOAD_TOO_LARGE');
  });

  test('wrong content type: 415 UNSUPPORTED_MEDIA_TYPE', async () => {
    for (const type of ['text/plain', 'application/xml', 'application/x-www-form-urlencoded']) {
      const res = await t.app.inject({ method: 'POST', url: '/__test/echo', headers: { 'content-type': type }, payload: 'name=x' });
      assertError(res, 415, 'UNSUPPORTED_MEDIA_TYPE');
    }
  });

  test('malformed JSON: 422 VALIDATION_FAILED, never 500', async () => {
    for (const payload of ['{"name": ', '{nope}', '[1,2', '"\\u12"']) {
      const res = await t.app.inject({ method: 'POST', url: '/__test/echo', headers: { 'content-type': 'application/json' }, payload });
      const body = assertError(res, 422, 'VALIDATION_FAILED');
      assert.ok(Array.isArray(body.error.details));
    }
  });

  test('an empty JSON body is {}: the schema then names what is missing (422)', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/__test/echo', headers: { 'content-type': 'application/json' }, payload: '' });
    const body = assertError(res, 422, 'VALIDATION_FAILED');
    assert.deepEqual(body.error.details.map((d: { field: string }) => d.field).sort(), ['items', 'name']);
  });

  test('schema violations: 422 with one detail per problem, in field notation', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/__test/echo',
      payload: { items: [{ email: 'a@b.co', n: 1 }, { email: 'nope', n: '2' }], extra: 1 },
    });
    const body = assertError(res, 422, 'VALIDATION_FAILED');
    const fields = body.error.details.map((d: { field: string }) => d.field).sort();
    assert.deepEqual(fields, ['extra', 'items[1].email', 'items[1].n', 'name']);
    for (const d of body.error.details) assert.equal(typeof d.message, 'string');
  });

  test('bodies are not type-coerced: "2" is not an integer', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/__test/echo', payload: { name: 'x', items: [{ email: 'a@b.co', n: '2' }] } });
    assertError(res, 422, 'VALIDATION_FAILED');
  });

  test('a valid body passes', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/__test/echo', payload: { name: 'x', items: [{ email: 'a@b.co', n: 2 }] } });
    assert.equal(res.statusCode, 200);
  });

  test('unexpected error: 500 without internals, request id in header and log', async () => {
    const res = await t.app.inject({ url: '/__test/boom' });
    assertError(res, 500, 'INTERNAL_SERVER_ERROR');
    assert.ok(!res.body.includes('hunter2'));
    assert.ok(!res.body.includes('secret internal detail'));
    assert.ok(!res.body.includes('stack'));
    const id = String(res.headers['x-request-id']);
    const line = logLines.map((l) => JSON.parse(l)).find((l) => l.reqId === id);
    assert.ok(line, 'the failure is logged under the request id');
    assert.match(JSON.stringify(line.err), /secret internal detail/);
  });

  // Found by the contract fuzz: the router answered these itself (414 and 400,
  // Fastify's own body) before the error handler could map them.
  test('a path parameter over the router limit is 404 and a broken percent-encoding 422, both in the envelope', async () => {
    for (const method of ['GET', 'DELETE'] as const) {
      const res = await t.app.inject({ method, url: `/public/v1/webhooks/${'a'.repeat(201)}`, headers: { 'x-api-key': key } });
      assertError(res, 404, 'NOT_FOUND');
    }
    assertError(await t.app.inject({ url: `/t/c/${'a'.repeat(201)}/x` }), 404, 'NOT_FOUND');
    const bad = await t.app.inject({ url: '/public/v1/email/templates/%ZZ', headers: { 'x-api-key': key } });
    assertError(bad, 422, 'VALIDATION_FAILED');
  });

  // Found by the contract fuzz: 10,000 levels parsed, then JSON.stringify
  // overflowed the stack further in (a 500 on POST /email/events).
  test('a body nested deeper than 64 levels is 422 before validation; 64 levels parse', async () => {
    const nested = (depth: number) => `{"name":"x","items":[],"deep":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;
    const deep = await t.app.inject({ method: 'POST', url: '/__test/echo', headers: { 'content-type': 'application/json' }, payload: nested(65) });
    const body = assertError(deep, 422, 'VALIDATION_FAILED');
    assert.deepEqual(body.error.details, [{ field: '(body)', message: 'is nested deeper than 64 levels' }]);
    const ok = await t.app.inject({ method: 'POST', url: '/__test/echo', headers: { 'content-type': 'application/json' }, payload: nested(64) });
    // Parsed: the schema then refuses the unknown field, naming it.
    assert.deepEqual(assertError(ok, 422, 'VALIDATION_FAILED').error.details, [{ field: 'deep', message: 'is not an allowed field' }]);
  });

  test('every response has an x-request-id, unique per request', async () => {
    const a = await t.app.inject({ url: '/healthz' });
    const b = await t.app.inject({ url: '/healthz' });
    assert.ok(a.headers['x-request-id']);
    assert.notEqual(a.headers['x-request-id'], b.headers['x-request-id']);
  });
});

test('enum and literal-union errors list the allowed values', () => {
  const enumIssue = { instancePath: '/security', keyword: 'enum', schemaPath: '#/properties/security/enum', message: 'must be equal to one of the allowed values', params: { allowedValues: ['tls', 'starttls', 'none'] } };
  assert.deepEqual(detailsFromAjv([enumIssue], 'body'), [{ field: 'security', message: 'must be one of: tls, starttls, none' }]);
  const union = [
    { instancePath: '/status', keyword: 'const', schemaPath: '#/properties/status/anyOf/0/const', message: 'must be equal to constant', params: { allowedValue: 'pending' } },
    { instancePath: '/status', keyword: 'const', schemaPath: '#/properties/status/anyOf/1/const', message: 'must be equal to constant', params: { allowedValue: 'success' } },
    { instancePath: '/status', keyword: 'anyOf', schemaPath: '#/properties/status/anyOf', message: 'must match a schema in anyOf', params: {} },
  ];
  assert.deepEqual(detailsFromAjv(union, 'querystring'), [{ field: 'status', message: 'must be one of: pending, success' }]);
  const constIssue = { instancePath: '/ok', keyword: 'const', schemaPath: '#/properties/ok/const', message: 'must be equal to constant', params: { allowedValue: true } };
  assert.deepEqual(detailsFromAjv([constIssue], 'body'), [{ field: 'ok', message: 'must be true' }]);
});

describe('enum errors through a route list the allowed values', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  test('a body enum (mail account security) and a query union of literals (deliveries status)', async () => {
    const { key } = await makeTeam(t.database.db);
    const res = await t.app.inject({
      method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key },
      payload: { host: 'smtp.example.com', port: 587, security: 'ssl', from_email: 'a@example.com' },
    });
    assert.equal(res.statusCode, 422, res.body);
    assert.deepEqual(res.json().error.details, [{ field: 'security', message: 'must be one of: tls, starttls, none' }]);
    const hook = await t.app.inject({
      method: 'POST', url: '/public/v1/webhooks', headers: { 'x-api-key': key },
      payload: { url: 'https://hooks.example.com/x', events: ['email.sent'], is_enabled: false },
    });
    const q = await t.app.inject({ url: `/public/v1/webhooks/${hook.json().webhook?.id ?? '00000000-0000-7000-8000-000000000000'}/deliveries?status=done`, headers: { 'x-api-key': key } });
    assert.equal(q.statusCode, 422, q.body);
    assert.deepEqual(q.json().error.details, [{ field: 'status', message: 'must be one of: pending, success, failed' }]);
  });
});
