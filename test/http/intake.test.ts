// Request intake (docs/api.md, "Envelope and errors"): no route reads more than its own limit,
// and none reads or parses a body before it knows the request may be answered.
// The unread-body cases run over a real socket: the head declares 10 MB, only
// 64 KiB is ever sent, and the answer must come anyway, fast, with the parser
// never run and the connection closed (the rest is never read).
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { jsonParseCount, parseJsonRequestBody } from '../../src/http/json-body.ts';
import { signedIn } from '../dashboard/session.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { head, openRaw, within } from './raw-client.ts';

const MIB = 1024 * 1024;
const UUID = '00000000-0000-4000-8000-000000000000';
let t: TestApp;
let port: number;
let key: string;
let otherKey: string;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  port = (t.app.server.address() as AddressInfo).port;
  ({ key } = await makeTeam(t.database.db, 'intake A'));
  ({ key: otherKey } = await makeTeam(t.database.db, 'intake B'));
});
after(async () => t?.close());

const parses = () => jsonParseCount.inline + jsonParseCount.pool;
const jsonHead = (extra: Record<string, string> = {}) => ({ 'content-type': 'application/json', 'content-length': String(10_000_000), ...extra });
const PREFIX = '{"contacts":[' + '{"email":"a@example.com"},'.repeat(2600); // ~64 KiB of a valid-looking body

describe('answered from the headers: the body is never read nor parsed', () => {
  const cases: { name: string; method: string; path: string; headers: () => Record<string, string>; status: number }[] = [
    { name: 'unknown path', method: 'POST', path: '/no/such/path', headers: () => jsonHead(), status: 404 },
    { name: 'unknown API path with a valid key', method: 'POST', path: '/public/v1/no/such', headers: () => jsonHead({ 'x-api-key': key }), status: 404 },
    { name: 'wrong method of an API route', method: 'DELETE', path: '/public/v1/ping', headers: () => jsonHead({ 'x-api-key': key }), status: 405 },
    { name: 'wrong method of the open pixel', method: 'PUT', path: `/t/o/${UUID}/sig.gif`, headers: () => jsonHead(), status: 405 },
    { name: 'wrong method of the click redirect', method: 'POST', path: `/t/c/${UUID}/sig?u=x`, headers: () => jsonHead(), status: 405 },
    { name: 'wrong method of the unsubscribe page', method: 'DELETE', path: `/u/${UUID}/sig`, headers: () => jsonHead(), status: 405 },
    { name: 'dashboard POST without a session', method: 'POST', path: '/developer/api-keys', headers: () => jsonHead(), status: 303 },
    {
      name: 'dashboard form POST without a session',
      method: 'POST',
      path: '/webhooks',
      headers: () => ({ 'content-type': 'application/x-www-form-urlencoded', 'content-length': '10000000' }),
      status: 303,
    },
    { name: 'sign-in without the sign-in page\'s cookie', method: 'POST', path: '/sign-in', headers: () => jsonHead(), status: 403 },
    { name: 'API route without a key', method: 'POST', path: '/public/v1/email/contacts/bulk-upsert', headers: () => jsonHead(), status: 401 },
    { name: 'API route with a revoked-looking key', method: 'POST', path: '/public/v1/email/contacts/upsert', headers: () => jsonHead({ 'x-api-key': 'plv_live_' + 'B'.repeat(43) }), status: 401 },
    { name: 'API route, non-JSON content type', method: 'POST', path: '/public/v1/email/contacts/upsert', headers: () => ({ ...jsonHead({ 'x-api-key': key }), 'content-type': 'text/plain' }), status: 415 },
    { name: 'unknown path, chunked', method: 'POST', path: '/no/such/path', headers: () => ({ 'content-type': 'application/json', 'transfer-encoding': 'chunked' }), status: 404 },
  ];
  for (const c of cases) {
    test(`${c.name}: ${c.status} within 2 s, parser never ran, connection closed`, async () => {
      const before = parses();
      const chunked = c.headers()['transfer-encoding'] === 'chunked';
      const body = chunked ? `${Buffer.byteLength(PREFIX).toString(16)}\r\n${PREFIX}\r\n` : PREFIX;
      const x = openRaw(port, head(c.method, c.path, c.headers()) + body);
      const res = await within(x.response, 2_000, c.name);
      assert.equal(res.status, c.status, res.head);
      assert.match(res.head, /\r\nconnection: close/i);
      // The server hangs up rather than reading the 9.9 MB still to come.
      await within(x.closed, 2_000, `${c.name}: connection close`);
      assert.equal(parses(), before, 'the JSON parser ran');
    });
  }

  test('a full 10 MB JSON body to an unknown path (inject) is answered without a parse', async () => {
    const before = parses();
    const payload = '[' + '1,'.repeat(5 * MIB - 1) + '1]';
    const started = performance.now();
    for (const [method, url] of [['POST', '/nowhere'], ['PUT', '/public/v1/ping'], ['PATCH', `/t/h/${UUID}/x`]] as const) {
      const res = await t.app.inject({ method, url, headers: { 'content-type': 'application/json', 'x-api-key': key }, payload });
      assert.ok(res.statusCode === 404 || res.statusCode === 405, `${method} ${url}: ${res.statusCode}`);
    }
    assert.ok(performance.now() - started < 3_000);
    assert.equal(parses(), before);
  });
});

describe('each route reads at most its own limit', () => {
  const big = (bytes: number) => JSON.stringify({ email: 'a@example.com', first_name: 'x'.repeat(bytes) });

  test('API default 256 KiB, template create 2 MiB, bulk 10 MiB: 413 PAYLOAD_TOO_LARGE over, parsed under', async () => {
    const post = (url: string, payload: string, k = key) =>
      t.app.inject({ method: 'POST', url: `/public/v1${url}`, headers: { 'x-api-key': k, 'content-type': 'application/json' }, payload });
    const over = await post('/email/contacts/upsert', big(256 * 1024));
    assert.equal(over.statusCode, 413);
    assert.equal(over.json().error.code, 'PAYLOAD_TOO_LARGE');
    assert.equal((await post('/email/contacts/upsert', big(200 * 1024))).statusCode, 422); // parsed: first_name too long
    const template = (chars: number) => JSON.stringify({ name: 't', subject: 's', content_type: 'html', content: 'x'.repeat(chars) });
    assert.equal((await post('/email/templates', template(2 * MIB))).statusCode, 413);
    const overContent = await post('/email/templates', template(MIB + 1)); // under 2 MiB: parsed, then content > 1 MiB
    assert.equal(overContent.statusCode, 422, overContent.body);
    assert.match(overContent.body, /content/);
    const contacts = (n: number, pad: number) => JSON.stringify({ contacts: Array.from({ length: n }, (_, i) => ({ email: `c${i}@example.com`, custom_str_1: 'p'.repeat(pad) })) });
    assert.equal((await post('/email/contacts/bulk-upsert', contacts(1000, 10_600))).statusCode, 413); // > 10 MiB
    assert.notEqual((await post('/email/contacts/bulk-upsert', contacts(1000, 3_000), otherKey)).statusCode, 413);
  });

  test('dashboard forms: 64 KiB, for a signed-in user too', async () => {
    const { session } = await signedIn(t.app, t.database.db);
    const res = await session.post('/developer/api-keys', { name: 'x'.repeat(70 * 1024) });
    assert.equal(res.statusCode, 413);
    const ok = await session.post('/developer/api-keys', { name: 'small key' });
    assert.ok(ok.statusCode < 400, String(ok.statusCode));
  });

  test('a Content-Length over the limit is refused before any byte of the body', async () => {
    const x = openRaw(port, head('POST', '/public/v1/email/contacts/bulk-upsert', jsonHead({ 'x-api-key': key, 'content-length': String(11 * MIB) })));
    const res = await within(x.response, 2_000, 'declared 11 MiB');
    assert.equal(res.status, 413);
    await within(x.closed, 2_000, 'connection close');
  });

  test('a chunked body is cut when it passes the limit', async () => {
    const x = openRaw(port, head('POST', '/public/v1/email/contacts/upsert', { 'x-api-key': key, 'content-type': 'application/json', 'transfer-encoding': 'chunked' }));
    const chunk = 'x'.repeat(32 * 1024);
    let sent = 0;
    let answered = false;
    void x.response.then(() => (answered = true));
    while (!answered && sent < 4 * MIB) {
      if (!x.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`)) break;
      sent += chunk.length;
      await new Promise((r) => setTimeout(r, 5));
    }
    const res = await within(x.response, 2_000, 'chunked');
    assert.equal(res.status, 413);
    assert.ok(sent <= 256 * 1024 + 8 * chunk.length, `the server read ${sent} bytes before answering`);
    await within(x.closed, 2_000, 'connection close');
  });
});

describe('JSON limits', () => {
  const post = (payload: string) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload });

  test('more than 100,000 values: 422 naming the limit (parsed in the pool: the body is over 64 KiB)', async () => {
    const poolBefore = jsonParseCount.pool;
    const res = await post(JSON.stringify({ contacts: [{ email: 'a@example.com' }], junk: Array(100_000).fill(0) }));
    assert.equal(res.statusCode, 422);
    assert.match(res.json().error.details[0].message, /more than 100000 values/);
    assert.equal(jsonParseCount.pool, poolBefore + 1);
  });

  test('exactly at the limit passes the parser (the schema then judges)', async () => {
    // 1 object + 1 array + 1 contact object + 1 email + array of n + n zeros + the key's object: count precisely.
    const res = await post(JSON.stringify({ contacts: [{ email: 'a@example.com' }], junk: Array(100_000 - 6).fill(0) }));
    assert.equal(res.statusCode, 422);
    assert.deepEqual(res.json().error.details, [{ field: 'junk', message: 'is not an allowed field' }]);
  });

  test('prototype poisoning and deep nesting are 422, in both parse paths', async () => {
    const pad = ',"pad":"' + 'p'.repeat(70 * 1024) + '"';
    for (const suffix of ['', pad]) {
      for (const body of ['{"__proto__":{"x":1}', '{"constructor":{"prototype":{"x":1}}', `{"deep":${'['.repeat(70)}${']'.repeat(70)}`]) {
        const res = await post(body + suffix + '}');
        assert.equal(res.statusCode, 422, `${body.slice(0, 30)} (${suffix ? 'pool' : 'inline'}): ${res.body.slice(0, 200)}`);
      }
    }
  });

  test('a large valid body is parsed in the pool and works end to end', async () => {
    const poolBefore = jsonParseCount.pool;
    const contacts = Array.from({ length: 1000 }, (_, i) => ({ email: `pool${i}@example.com`, first_name: `P${i}`, custom_str_1: 'v'.repeat(100) }));
    const res = await post(JSON.stringify({ contacts }));
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().summary.created, 1000);
    assert.equal(jsonParseCount.pool, poolBefore + 1);
  });
});

describe('large JSON bodies reach the pool as bytes', () => {
  const opts = { maxValues: 100_000, poolThresholdBytes: 64 * 1024 };
  const large = () => Buffer.from(JSON.stringify({ name: 'é'.repeat(40_000), list: Array.from({ length: 2_000 }, (_, i) => i) }), 'utf8');

  test("the API's body is moved, not copied: its buffer is empty here once the pool has it, and the value is whole", async () => {
    const body = large();
    const size = body.byteLength;
    assert.ok(size > opts.poolThresholdBytes);
    const before = jsonParseCount.pool;
    const value = (await parseJsonRequestBody(body, opts, undefined, true)) as { name: string; list: number[] };
    assert.equal(jsonParseCount.pool, before + 1);
    assert.equal(body.byteLength, 0, `the ${size} bytes were copied, not moved`);
    assert.equal(value.name, 'é'.repeat(40_000), 'decoded as UTF-8 in the pool');
    assert.equal(value.list.length, 2_000);
  });

  test('a body the caller still needs (a provider webhook checks its signature over it) is copied and left intact', async () => {
    const body = large();
    const copy = Buffer.from(body);
    await parseJsonRequestBody(body, opts);
    assert.ok(body.equals(copy));
  });
});

describe('a team\'s bulk requests in flight are capped', () => {
  test('a third concurrent bulk request of one team is 429 with Retry-After; another team is not held; a slot frees on close', async () => {
    const hold = () => openRaw(port, head('POST', '/public/v1/email/contacts/bulk-upsert', jsonHead({ 'x-api-key': key })) + PREFIX);
    const held = [hold(), hold()];
    await new Promise((r) => setTimeout(r, 300)); // both are past the gate, reading their bodies
    const third = hold();
    const res = await within(third.response, 2_000, 'third bulk request');
    assert.equal(res.status, 429, res.head);
    assert.match(res.head, /\r\nretry-after: 1/i);
    const other = await t.app.inject({
      method: 'POST',
      url: '/public/v1/email/contacts/bulk-upsert',
      headers: { 'x-api-key': otherKey },
      payload: { contacts: [{ email: 'other-team@example.com' }] },
    });
    assert.equal(other.statusCode, 200, other.body);
    for (const h of held) h.socket.destroy();
    await Promise.all(held.map((h) => h.closed));
    let status = 0;
    for (let i = 0; i < 40 && status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 50));
      status = (await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': key }, payload: { contacts: [{ email: 'after@example.com' }] } })).statusCode;
    }
    assert.equal(status, 200);
  });
});
