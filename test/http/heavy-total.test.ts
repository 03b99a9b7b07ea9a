// Bulk requests in flight are capped for the whole process, not only per team:
// many teams each within their own cap must not buffer 10 MiB bodies without
// bound (HEAVY_REQUESTS_TOTAL). Over a real socket: the held requests declare
// 10 MB and send 64 KiB, so they stay in flight until closed.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { head, openRaw, within } from './raw-client.ts';

let t: TestApp;
let port: number;
before(async () => {
  t = await buildTestApp({ config: { intake: { ...testConfig().intake, heavyRequestsPerTeam: 2, heavyRequestsTotal: 3 } } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  port = (t.app.server.address() as AddressInfo).port;
});
after(async () => t?.close());

const PREFIX = '{"contacts":[' + '{"email":"a@example.com"},'.repeat(2600);
const hold = (key: string) =>
  openRaw(port, head('POST', '/public/v1/email/contacts/bulk-upsert', { 'content-type': 'application/json', 'content-length': '10000000', 'x-api-key': key }) + PREFIX);

test('past the process-wide cap a bulk request is 503 with Retry-After, whatever its team; a slot frees on close', async () => {
  const [a, b, c] = [await makeTeam(t.database.db, 'A'), await makeTeam(t.database.db, 'B'), await makeTeam(t.database.db, 'C')];
  const held = [hold(a.key), hold(a.key), hold(b.key)];
  await new Promise((r) => setTimeout(r, 300)); // all three are past the gate, reading their bodies
  const res = await within(hold(c.key).response, 2_000, "team C's bulk request");
  assert.equal(res.status, 503, res.head);
  assert.match(res.head, /\r\nretry-after: 1/i);
  assert.match(res.head, /\r\nconnection: close/i); // its body is left unread
  // Small routes are not held by the bulk cap.
  const ping = await t.app.inject({ method: 'GET', url: '/public/v1/ping', headers: { 'x-api-key': c.key } });
  assert.equal(ping.statusCode, 200);
  held[2]!.socket.destroy();
  await held[2]!.closed;
  let status = 0;
  for (let i = 0; i < 40 && status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 50));
    status = (await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': c.key }, payload: { contacts: [{ email: 'c@example.com' }] } })).statusCode;
  }
  assert.equal(status, 200);
  for (const h of held.slice(0, 2)) h.socket.destroy();
  await Promise.all(held.slice(0, 2).map((h) => h.closed));
});
