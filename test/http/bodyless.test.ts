// Bodyless actions (docs/api.md, "Envelope and errors"): start, stop, enable, disable and resend take
// no body, and clients send one anyway: axios sends
// `application/x-www-form-urlencoded` with zero bytes (as the n8n community node
// does), others `application/json` with zero bytes, `text/plain`, or nothing.
// Every one of them, and `{}`, must work. Driven by axios itself against a
// listening app, and by raw node:http requests.
import assert from 'node:assert/strict';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import axios from 'axios';
import { createWorld, type World } from '../fuzz/world.ts';

let world: World;
let origin: string;
before(async () => {
  world = await createWorld();
  await world.app.listen({ port: 0, host: '127.0.0.1' });
  origin = `http://127.0.0.1:${(world.app.server.address() as AddressInfo).port}`;
});
after(async () => world?.close());

/** The bodyless actions of team A, in an order that leaves each valid to repeat. */
function actions(): { path: string; ok: number }[] {
  const { ids } = world.a;
  return [
    { path: `/public/v1/email/campaigns/${ids.campaign[0]}/stop`, ok: 200 },
    { path: `/public/v1/email/campaigns/${ids.campaign[0]}/start`, ok: 200 },
    { path: `/public/v1/webhooks/${ids.webhook[0]}/disable`, ok: 200 },
    { path: `/public/v1/webhooks/${ids.webhook[0]}/enable`, ok: 200 },
    { path: `/public/v1/webhooks/${ids.webhook[0]}/deliveries/${ids.delivery[0]}/resend`, ok: 202 },
  ];
}

function raw(path: string, headers: Record<string, string>, body: string, method = 'POST'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${origin}${path}`, { method, headers: { 'x-api-key': world.a.key, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('bodyless actions accept an empty body under any content type, and {}', () => {
  test('axios: no data (its default urlencoded content type), and explicit content types with zero bytes', async () => {
    const client = axios.create({ baseURL: origin, headers: { 'x-api-key': world.a.key }, validateStatus: () => true });
    const variants: { name: string; send: (path: string) => Promise<{ status: number; data: unknown; config: { headers: unknown } }> }[] = [
      // Exactly what the n8n node does: a POST with no data at all.
      { name: 'axios.post(url)', send: (p) => client.post(p) },
      { name: 'urlencoded, empty', send: (p) => client.post(p, '', { headers: { 'content-type': 'application/x-www-form-urlencoded' } }) },
      // axios JSON-encodes '' under a JSON type (it sends `""`); the identity transform sends zero bytes.
      { name: 'json, zero bytes', send: (p) => client.post(p, '', { headers: { 'content-type': 'application/json' }, transformRequest: [(d) => d] }) },
      { name: 'json, axios\'s ""', send: (p) => client.post(p, '', { headers: { 'content-type': 'application/json' } }) },
      { name: 'text/plain, empty', send: (p) => client.post(p, '', { headers: { 'content-type': 'text/plain' } }) },
      { name: 'json {}', send: (p) => client.post(p, {}) },
    ];
    for (const v of variants) {
      for (const a of actions()) {
        const res = await v.send(a.path);
        assert.equal(res.status, a.ok, `${v.name} ${a.path}: ${res.status} ${JSON.stringify(res.data)}`);
        assert.equal((res.data as { ok: boolean }).ok, true);
      }
    }
  });

  test('what axios puts on the wire for these calls (captured by a plain node:http server)', async () => {
    const seen: Record<string, string | undefined>[] = [];
    const capture = createServer((req, res) => {
      let n = 0;
      req.on('data', (c: Buffer) => (n += c.length));
      req.on('end', () => {
        seen.push({ type: req.headers['content-type'], length: req.headers['content-length'], te: req.headers['transfer-encoding'], bytes: String(n) });
        res.end('{}');
      });
    });
    await new Promise<void>((resolve) => capture.listen(0, '127.0.0.1', resolve));
    try {
      const base = `http://127.0.0.1:${(capture.address() as AddressInfo).port}`;
      await axios.post(`${base}/x`);
      await axios.post(`${base}/x`, '', { headers: { 'content-type': 'application/json' }, transformRequest: [(d) => d] });
      await axios.post(`${base}/x`, '', { headers: { 'content-type': 'application/json' } });
      // No data: urlencoded type (axios's default for a string or no body), zero bytes.
      assert.match(String(seen[0]!.type), /application\/x-www-form-urlencoded/);
      assert.equal(seen[0]!.bytes, '0');
      assert.equal(seen[1]!.type, 'application/json');
      assert.equal(seen[1]!.bytes, '0');
      assert.equal(seen[2]!.type, 'application/json');
      assert.equal(seen[2]!.bytes, '2'); // `""`
    } finally {
      await new Promise((resolve) => capture.close(resolve));
    }
  });

  test('raw node:http: urlencoded, json, text/plain and no content type with Content-Length 0; chunked and empty; {}', async () => {
    const variants: { name: string; headers: Record<string, string>; body: string }[] = [
      { name: 'urlencoded, 0 bytes', headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '0' }, body: '' },
      { name: 'json, 0 bytes', headers: { 'content-type': 'application/json', 'content-length': '0' }, body: '' },
      { name: 'text/plain, 0 bytes', headers: { 'content-type': 'text/plain', 'content-length': '0' }, body: '' },
      { name: 'no content type, 0 bytes', headers: { 'content-length': '0' }, body: '' },
      { name: 'no content type, no length', headers: {}, body: '' },
      { name: 'urlencoded, chunked, empty', headers: { 'content-type': 'application/x-www-form-urlencoded', 'transfer-encoding': 'chunked' }, body: '' },
      { name: 'json, chunked, empty', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, body: '' },
      { name: 'json {}', headers: { 'content-type': 'application/json' }, body: '{}' },
      { name: 'json {} with charset', headers: { 'content-type': 'application/json; charset=utf-8' }, body: '{}' },
    ];
    for (const v of variants) {
      for (const a of actions()) {
        const res = await raw(a.path, v.headers, v.body);
        assert.equal(res.status, a.ok, `${v.name} ${a.path}: ${res.status} ${res.body}`);
      }
    }
  });

  test('a non-empty body: 415 under a non-JSON type, 422 when JSON does not parse', async () => {
    const path = actions()[0]!.path;
    const form = await raw(path, { 'content-type': 'application/x-www-form-urlencoded' }, 'a=1');
    assert.equal(form.status, 415, form.body);
    assert.equal(JSON.parse(form.body).error.code, 'UNSUPPORTED_MEDIA_TYPE');
    const text = await raw(path, { 'content-type': 'text/plain' }, 'hello');
    assert.equal(text.status, 415, text.body);
    const broken = await raw(path, { 'content-type': 'application/json' }, '{"a":');
    assert.equal(broken.status, 422, broken.body);
    assert.equal(JSON.parse(broken.body).error.code, 'VALIDATION_FAILED');
  });
});

describe('routes that take JSON', () => {
  test('an empty body is {} under any content type: the schema names the missing fields (422), never 415', async () => {
    const variants: Record<string, string>[] = [
      { 'content-type': 'application/json', 'content-length': '0' },
      { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '0' },
      { 'content-length': '0' },
    ];
    for (const headers of variants) {
      const res = await raw('/public/v1/email/contacts/upsert', headers, '');
      assert.equal(res.status, 422, res.body);
      const body = JSON.parse(res.body);
      assert.equal(body.error.code, 'VALIDATION_FAILED');
      assert.deepEqual(body.error.details.map((d: { field: string }) => d.field), ['email']);
    }
  });

  test('a route whose fields are all optional takes an empty body as {}', async () => {
    // PATCH /webhooks/:id: every field optional; an empty body changes nothing.
    const res = await raw(`/public/v1/webhooks/${world.a.ids.webhook[1]}`, { 'content-type': 'application/json', 'content-length': '0' }, '', 'PATCH');
    assert.ok(res.status === 200 || res.status === 422, res.body);
    assert.notEqual(res.status, 415);
  });

  test('a non-empty body under a non-JSON content type is 415; malformed JSON is 422', async () => {
    const form = await raw('/public/v1/email/contacts/upsert', { 'content-type': 'application/x-www-form-urlencoded' }, 'email=a%40b.co');
    assert.equal(form.status, 415, form.body);
    const broken = await raw('/public/v1/email/contacts/upsert', { 'content-type': 'application/json' }, '{"email":');
    assert.equal(broken.status, 422, broken.body);
  });
});
