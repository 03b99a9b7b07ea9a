import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TrackingLinks } from '../../src/lib/tracking-links.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { BROWSER_UA, countersOf, eventsOf, insertSend, makeSend, pathOf, testLinks } from './fixtures.ts';

const links = testLinks();
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

describe('tracking: team isolation and hostile input', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  test("a signature binds its send: team A's signatures do not act on team B's send", async () => {
    const a = await makeSend(t, { email: 'shared@example.com' });
    const b = await makeSend(t, { email: 'shared@example.com' });
    const swap = (url: string) => pathOf(url).replace(a.send.id, b.send.id);
    const target = 'https://a.example.com/';

    assert.equal((await t.app.inject({ url: swap(links.clickUrl(a.send.id, target)), headers: { 'user-agent': BROWSER_UA } })).statusCode, 404);
    await t.app.inject({ url: swap(links.openPixelUrl(a.send.id)), headers: { 'user-agent': BROWSER_UA } });
    await t.app.inject({ url: swap(links.honeypotUrl(a.send.id)) });
    for (const method of ['GET', 'POST'] as const) {
      const res = await t.app.inject({ method, url: swap(links.unsubscribeUrl(a.send.id)), headers: FORM, payload: method === 'POST' ? 'List-Unsubscribe=One-Click' : undefined });
      assert.equal(res.statusCode, 404);
    }
    assert.deepEqual(await eventsOf(t.database.db, b.teamId), []);
    const cb = await countersOf(t.database.db, b.send);
    assert.deepEqual([cb.log.opens_count, cb.log.clicks_count], [0, 0]);
  });

  test("team A's own unsubscribe link unsubscribes the address in team A only", async () => {
    const a = await makeSend(t, { email: 'both@example.com' });
    const b = await makeSend(t, { email: 'both@example.com' });
    const res = await t.app.inject({ method: 'POST', url: pathOf(links.unsubscribeUrl(a.send.id)), headers: FORM, payload: 'List-Unsubscribe=One-Click' });
    assert.equal(res.statusCode, 200);
    const status = async (id: string) =>
      (await t.database.db.selectFrom('contacts').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;
    assert.equal(await status(a.send.contactId!), 'unsubscribed');
    assert.equal(await status(b.send.contactId!), 'active');
    const listB = (await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes', headers: { 'x-api-key': b.key } })).json();
    assert.deepEqual(listB.contacts, []);
    assert.deepEqual(await eventsOf(t.database.db, b.teamId), []);
  });

  test("contact counters are written within the send's own team only", async () => {
    const a = await makeSend(t);
    const b = await makeSend(t);
    // A send row that (wrongly) names another team's contact: counters are updated within the send's team only.
    const crossed = await insertSend(t.database.db, a.teamId, { contactId: b.send.contactId, email: 'x@example.com' });
    await t.app.inject({ url: pathOf(links.openPixelUrl(crossed.id)), headers: { 'user-agent': BROWSER_UA } });
    assert.equal((await countersOf(t.database.db, b.send)).contact!.opens_count, 0);
    assert.equal((await countersOf(t.database.db, crossed)).log.opens_count, 1);
    const [e] = await eventsOf(t.database.db, a.teamId);
    assert.equal(e!.name, 'email.opened');
  });

  test('links signed with another APP_SECRET are refused', async () => {
    const { send, teamId } = await makeSend(t);
    const other = new TrackingLinks(testConfig().publicUrl, 'f'.repeat(64));
    assert.equal((await t.app.inject({ url: pathOf(other.clickUrl(send.id, 'https://x.example.com/')) })).statusCode, 404);
    assert.equal((await t.app.inject({ url: pathOf(other.unsubscribeUrl(send.id)) })).statusCode, 404);
    const pixel = await t.app.inject({ url: pathOf(other.openPixelUrl(send.id)) });
    assert.equal(pixel.headers['content-type'], 'image/gif');
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
  });

  test('hostile input is never a 500', async () => {
    const { send } = await makeSend(t);
    const sig = links.sign('click', send.id, 'https://x.example.com/');
    const urls = [
      `/t/c/${send.id}/${sig}?u[]=x`,
      `/t/c/${send.id}/${sig}?u=${encodeURIComponent('https://x.example.com/\r\nSet-Cookie: a=b')}`,
      `/t/c/${send.id}/${'%20'.repeat(60)}?u=x`,
      `/t/c/%2e%2e/%2e%2e?u=https://x.example.com/`,
      `/t/h/${'z'.repeat(36)}/x`,
      `/u/${send.id.toUpperCase()}/${links.sign('unsubscribe', send.id)}`,
      `/u/%00/%00`,
      `/t/o/${send.id}/${'a'.repeat(199)}`,
    ];
    for (const url of urls) {
      for (const method of ['GET', 'HEAD', 'POST', 'PUT'] as const) {
        const res = await t.app.inject({ method, url, headers: { 'user-agent': 'x\u0000y' } });
        assert.ok(res.statusCode < 500, `${method} ${url}: ${res.statusCode} ${res.body.slice(0, 200)}`);
      }
    }
  });

  test('a user agent with control characters is stored cleaned, and capped in length', async () => {
    const { send, teamId } = await makeSend(t);
    await t.app.inject({ url: pathOf(links.openPixelUrl(send.id)), headers: { 'user-agent': `Mozilla/5.0 (X11; Linux)\u0001${'a'.repeat(5000)}` } });
    const [e] = await eventsOf(t.database.db, teamId);
    const ua = (e!.payload as Record<string, string>).user_agent;
    assert.equal(ua.length, 1000);
    assert.ok(ua.startsWith('Mozilla/5.0 (X11; Linux)aaa'));
  });

  test('the tracking routes stay out of the OpenAPI document', async () => {
    const doc = (await t.app.inject({ url: '/public/v1/openapi.json' })).json();
    const paths = Object.keys(doc.paths);
    assert.ok(paths.length > 0);
    assert.deepEqual(paths.filter((p) => p.startsWith('/t/') || p.startsWith('/u/')), []);
  });
});
