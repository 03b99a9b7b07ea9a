import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { multipartIsOneClick } from '../../src/mail/tracking-routes.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { eventsOf, makeSend, pathOf, testLinks } from './fixtures.ts';

const links = testLinks();
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

describe('unsubscribe from mail', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const contactOf = (id: string) =>
    t.database.db.selectFrom('contacts').select(['status', 'unsubscribed_at', 'unsubscribed_reason']).where('id', '=', id).executeTakeFirstOrThrow();
  const unsubscribes = async (key: string) =>
    (await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes', headers: { 'x-api-key': key } })).json();

  test('GET shows a confirmation page with a POST form and does not unsubscribe', async () => {
    const { send, teamId } = await makeSend(t);
    for (const method of ['GET', 'HEAD'] as const) {
      const res = await t.app.inject({ method, url: pathOf(links.unsubscribeUrl(send.id)) });
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /^text\/html; charset=utf-8/);
      assert.equal(res.headers['cache-control'], 'no-store');
      assert.match(String(res.headers['content-security-policy']), /default-src 'none'/);
      if (method === 'GET') {
        assert.match(res.body, /<form method="post">/);
        assert.ok(res.body.includes(send.email));
        assert.ok(res.body.includes('Test team'));
      }
    }
    assert.equal((await contactOf(send.contactId!)).status, 'active');
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
  });

  test('POST from the page form unsubscribes with method link; again is idempotent', async () => {
    const { send, teamId, key } = await makeSend(t);
    const url = pathOf(links.unsubscribeUrl(send.id));
    const res = await t.app.inject({ method: 'POST', url, headers: FORM, payload: 'confirm=unsubscribe' });
    assert.equal(res.statusCode, 200);
    assert.match(res.body, /You have been unsubscribed/);
    const c = await contactOf(send.contactId!);
    assert.equal(c.status, 'unsubscribed');
    assert.ok(c.unsubscribed_at);
    assert.equal(c.unsubscribed_reason, 'unsubscribed via link');

    const events = await eventsOf(t.database.db, teamId);
    assert.deepEqual(events.map((e) => e.name), ['contact.unsubscribed']);
    const p = events[0]!.payload as Record<string, unknown>;
    assert.equal(p.unsubscribe_method, 'link');
    assert.equal(p.email, send.email);
    assert.equal(p.contact_id, send.contactId);

    const again = await t.app.inject({ method: 'POST', url, headers: FORM, payload: 'confirm=unsubscribe' });
    assert.equal(again.statusCode, 200);
    assert.match(again.body, /unsubscribed/);
    assert.equal((await eventsOf(t.database.db, teamId)).length, 1, 'no second event');
    assert.deepEqual((await contactOf(send.contactId!)).unsubscribed_at, c.unsubscribed_at);

    const list = await unsubscribes(key);
    assert.deepEqual(list.contacts.map((x: { email: string }) => x.email), [send.email]);
    assert.equal(list.contacts[0].unsubscribed_reason, 'unsubscribed via link');

    const page = await t.app.inject({ url });
    assert.match(page.body, /You are unsubscribed/, 'GET afterwards says so instead of asking again');
  });

  test('RFC 8058 one-click POST unsubscribes at once with method one_click and is listed', async () => {
    const { send, teamId, key } = await makeSend(t);
    const res = await t.app.inject({
      method: 'POST',
      url: pathOf(links.unsubscribeUrl(send.id)),
      headers: FORM,
      payload: 'List-Unsubscribe=One-Click',
    });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers.location, undefined, 'RFC 8058: no redirect');
    assert.equal((await contactOf(send.contactId!)).status, 'unsubscribed');
    const [e] = await eventsOf(t.database.db, teamId);
    assert.equal(e!.name, 'contact.unsubscribed');
    assert.equal((e!.payload as Record<string, unknown>).unsubscribe_method, 'one_click');
    const list = await unsubscribes(key);
    assert.deepEqual(list.contacts.map((x: { email: string }) => x.email), [send.email]);
  });

  test('one-click as multipart/form-data (the RFC example) is one_click too', async () => {
    const { send, teamId } = await makeSend(t);
    const boundary = '---FormBoundaryjWmhtjORrn';
    const payload = `--${boundary}\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n--${boundary}--\r\n`;
    const res = await t.app.inject({
      method: 'POST',
      url: pathOf(links.unsubscribeUrl(send.id)),
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
      payload,
    });
    assert.equal(res.statusCode, 200);
    const [e] = await eventsOf(t.database.db, teamId);
    assert.equal((e!.payload as Record<string, unknown>).unsubscribe_method, 'one_click');
  });

  test('the multipart reader finds only the List-Unsubscribe field, in linear time', () => {
    const part = (name: string, value: string, extra = '') =>
      `--b\r\nContent-Disposition: form-data; name="${name}"${extra}\r\n\r\n${value}\r\n`;
    assert.equal(multipartIsOneClick(part('List-Unsubscribe', 'One-Click') + '--b--\r\n'), true);
    assert.equal(multipartIsOneClick(part('x', 'y') + part('List-Unsubscribe', 'One-Click', '\r\nContent-Type: text/plain') + '--b--'), true);
    assert.equal(multipartIsOneClick(part('List-Unsubscribe-Other', 'One-Click')), false);
    assert.equal(multipartIsOneClick(part('List-Unsubscribe', 'Two-Clicks')), false);
    assert.equal(multipartIsOneClick(part('other', 'One-Click')), false);
    assert.equal(multipartIsOneClick(''), false);
    const hostile = 'Content-Disposition: form-data;' + ';name=List-Unsubscribe'.repeat(800);
    const t0 = performance.now();
    multipartIsOneClick(hostile);
    assert.ok(performance.now() - t0 < 50, 'no catastrophic backtracking');
  });

  test('a POST with no body or another content type still unsubscribes (method link), never 415', async () => {
    for (const [headers, payload] of [
      [{}, undefined],
      [{ 'content-type': 'application/json' }, '{not json'],
      [{ 'content-type': 'text/plain' }, 'List-Unsubscribe=One-Click'],
    ] as const) {
      const { send, teamId } = await makeSend(t);
      const res = await t.app.inject({ method: 'POST', url: pathOf(links.unsubscribeUrl(send.id)), headers, payload });
      assert.equal(res.statusCode, 200, `${JSON.stringify(headers)}: ${res.body.slice(0, 200)}`);
      const [e] = await eventsOf(t.database.db, teamId);
      assert.equal((e!.payload as Record<string, unknown>).unsubscribe_method, 'link');
    }
  });

  test('an oversized body is a 413 page, and nothing changes', async () => {
    const { send } = await makeSend(t);
    const res = await t.app.inject({
      method: 'POST',
      url: pathOf(links.unsubscribeUrl(send.id)),
      headers: FORM,
      payload: `List-Unsubscribe=One-Click&x=${'a'.repeat(20_000)}`,
    });
    assert.equal(res.statusCode, 413);
    assert.match(String(res.headers['content-type']), /^text\/html/);
    assert.equal((await contactOf(send.contactId!)).status, 'active');
  });

  test('invalid signatures are 404 pages on GET and POST, and nothing changes', async () => {
    const { send, teamId } = await makeSend(t);
    const good = new URL(links.unsubscribeUrl(send.id)).pathname;
    const bad = [
      good.slice(0, -2) + 'AA',
      `/u/${send.id}/${links.sign('open', send.id)}`,
      `/u/not-a-uuid/${good.split('/')[3]}`,
      `/u/0190a7e2-0000-7000-8000-0000000000bb/${links.sign('unsubscribe', '0190a7e2-0000-7000-8000-0000000000bb')}`,
    ];
    for (const url of bad) {
      for (const method of ['GET', 'POST'] as const) {
        const res = await t.app.inject({ method, url, headers: FORM, payload: method === 'POST' ? 'List-Unsubscribe=One-Click' : undefined });
        assert.equal(res.statusCode, 404, `${method} ${url}`);
        assert.match(res.body, /Link not found/);
      }
    }
    assert.equal((await contactOf(send.contactId!)).status, 'active');
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
  });

  test('a send whose contact was deleted: the address is suppressed (contact created unsubscribed)', async () => {
    const { send, teamId, key } = await makeSend(t, { contactId: null, email: 'gone@example.com' });
    await t.app.inject({ method: 'POST', url: pathOf(links.unsubscribeUrl(send.id)), headers: FORM, payload: 'List-Unsubscribe=One-Click' });
    const list = await unsubscribes(key);
    assert.deepEqual(list.contacts.map((x: { email: string }) => x.email), ['gone@example.com']);
    assert.equal((await eventsOf(t.database.db, teamId, 'contact.unsubscribed')).length, 1);
  });

  test('values on the page are escaped', async () => {
    const { send } = await makeSend(t);
    await t.database.db
      .updateTable('teams')
      .set({ name: '<script>alert("x")</script> & Co' })
      .where('id', '=', send.teamId)
      .execute();
    const res = await t.app.inject({ url: pathOf(links.unsubscribeUrl(send.id)) });
    assert.doesNotMatch(res.body, /<script>/);
    assert.ok(res.body.includes('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; Co'));
  });
});
