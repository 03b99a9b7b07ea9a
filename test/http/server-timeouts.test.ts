// Slow clients cannot hold sockets: a client sending its headers byte by byte
// slower than the headers timeout (slowloris) is disconnected within the bound,
// and one sending its body too slowly is cut at the request timeout. The
// timeouts are shortened through the settings; the defaults are in
// docs/security.md.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { head, openRaw, within } from './raw-client.ts';

const HEADERS_TIMEOUT = 600;
const REQUEST_TIMEOUT = 1_500;
let t: TestApp;
let port: number;
let key: string;
before(async () => {
  t = await buildTestApp({
    config: { intake: { ...testConfig().intake, headersTimeoutMs: HEADERS_TIMEOUT, requestTimeoutMs: REQUEST_TIMEOUT } },
  });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  port = (t.app.server.address() as AddressInfo).port;
  ({ key } = await makeTeam(t.database.db));
});
after(async () => t?.close());

/** Writes `text` one byte every `everyMs` until the socket closes; resolves with the bytes written. */
async function trickle(x: ReturnType<typeof openRaw>, text: string, everyMs: number): Promise<number> {
  let i = 0;
  let open = true;
  void x.closed.then(() => (open = false));
  while (open && i < text.length) {
    if (!x.write(text[i]!)) break;
    i++;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return i;
}

test('slowloris: headers sent one byte every 100 ms are cut at the headers timeout (plus the check interval)', async () => {
  const x = openRaw(port);
  const headers = 'GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ' + 'a'.repeat(1_000) + '\r\n\r\n';
  void trickle(x, headers, 100);
  // Node checks on an interval (here a quarter of the timeout), so the bound is timeout + interval + slack.
  const closedAt = await within(x.closed, HEADERS_TIMEOUT + 1_500, 'slow headers');
  assert.ok(closedAt >= HEADERS_TIMEOUT - 50, `closed after ${closedAt} ms: too early`);
  console.log('slow headers closed after', Math.round(closedAt), 'ms');
  const res = await x.response;
  assert.ok(res.status === 408 || res.status === 0, `answer ${res.status}`);
});

test('a body sent too slowly is cut at the request timeout', async () => {
  const body = JSON.stringify({ email: 'slow@example.com', first_name: 'x'.repeat(200) });
  const x = openRaw(port, head('POST', '/public/v1/email/contacts/upsert', { 'x-api-key': key, 'content-type': 'application/json', 'content-length': String(body.length) }));
  const written = trickle(x, body, 50);
  const closedAt = await within(x.closed, REQUEST_TIMEOUT + 2_000, 'slow body');
  assert.ok(closedAt >= REQUEST_TIMEOUT - 50, `closed after ${closedAt} ms: too early`);
  console.log('slow body closed after', Math.round(closedAt), 'ms');
  assert.ok((await written) < body.length, 'the whole body got through');
  const res = await x.response;
  assert.ok(res.status === 408 || res.status === 0, `answer ${res.status}`);
});

test('a prompt client on the same server is served', async () => {
  const res = await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } });
  assert.equal(res.statusCode, 200);
  // The settings reached the listening server.
  assert.equal(t.app.server.headersTimeout, HEADERS_TIMEOUT);
  assert.equal(t.app.server.requestTimeout, REQUEST_TIMEOUT);
  assert.equal(t.app.server.maxConnections, testConfig().intake.maxConnections);
  assert.equal(t.app.server.maxRequestsPerSocket, testConfig().intake.maxRequestsPerSocket);
  assert.equal(t.app.server.keepAliveTimeout, testConfig().intake.keepAliveTimeoutMs);
});
