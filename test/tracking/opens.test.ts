import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PIXEL_GIF } from '../../src/mail/tracking-routes.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { BROWSER_UA, countersOf, eventsOf, hitsOf, insertContact, makeSend, pathOf, testLinks } from './fixtures.ts';

const links = testLinks();
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

describe('open pixel', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const open = (url: string, opts: { ua?: string | null; method?: 'GET' | 'HEAD'; ip?: string } = {}) =>
    t.app.inject({
      method: opts.method ?? 'GET',
      url,
      // light-my-request sends its own UA unless one is given; '' stands for none.
      headers: { 'user-agent': opts.ua === null ? '' : (opts.ua ?? BROWSER_UA) },
      remoteAddress: opts.ip ?? '127.0.0.1',
    });

  function assertPixel(res: Awaited<ReturnType<typeof open>>) {
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'image/gif');
    assert.match(String(res.headers['cache-control']), /no-store/);
    assert.match(String(res.headers['cache-control']), /no-cache/);
  }

  test('answers a 1×1 transparent GIF with no-store headers', async () => {
    const { send } = await makeSend(t);
    const res = await open(pathOf(links.openPixelUrl(send.id)));
    assertPixel(res);
    assert.deepEqual(res.rawPayload, PIXEL_GIF);
    assert.equal(res.rawPayload.subarray(0, 6).toString('latin1'), 'GIF89a');
    assert.equal(res.rawPayload.readUInt16LE(6), 1, 'width 1');
    assert.equal(res.rawPayload.readUInt16LE(8), 1, 'height 1');
  });

  test("a person's open counts and emits email.opened with the 6.3 payload; a repeat within the hour only adds to the raw total", async () => {
    const { teamId, send } = await makeSend(t);
    await t.database.db.updateTable('contacts').set({ country_code: 'DE' }).where('id', '=', send.contactId!).execute();
    const res = await open(pathOf(links.openPixelUrl(send.id)), { ip: '203.0.113.9' });
    assertPixel(res);

    const c = await countersOf(t.database.db, send);
    assert.equal(c.log.opens_count, 1);
    assert.equal(c.contact!.opens_count, 1);
    assert.ok(c.log.first_opened_at && c.contact!.first_opened_at && c.contact!.last_opened_at);
    assert.equal(c.log.clicks_count, 0);

    const events = await eventsOf(t.database.db, teamId);
    assert.equal(events.length, 1);
    assert.equal(events[0]!.name, 'email.opened');
    assert.equal(events[0]!.contact_id, send.contactId);
    const p = events[0]!.payload as Record<string, unknown>;
    assert.deepEqual(Object.keys(p).sort(), ['contact_id', 'country_code', 'email', 'email_send_log_id', 'ip_address', 'opened_at', 'user_agent']);
    assert.equal(p.email_send_log_id, send.id);
    assert.equal(p.contact_id, send.contactId);
    assert.equal(p.email, send.email);
    assert.match(String(p.opened_at), ISO_MS);
    assert.equal(p.ip_address, '203.0.113.9');
    assert.equal(p.user_agent, BROWSER_UA);
    assert.equal(p.country_code, 'DE', "the contact's country");

    const hits = await hitsOf(t.database.db, send.id);
    assert.equal(hits.length, 1);
    assert.deepEqual([hits[0]!.kind, hits[0]!.is_bot, hits[0]!.event_id], ['open', false, events[0]!.id]);

    assertPixel(await open(pathOf(links.openPixelUrl(send.id)), { ip: '203.0.113.9' }));
    const again = await countersOf(t.database.db, send);
    assert.equal(again.log.opens_count, 1);
    assert.equal(again.log.open_hits_count, 2);
    assert.equal(again.contact!.opens_count, 1);
    assert.deepEqual(again.contact!.first_opened_at, c.contact!.first_opened_at, 'first open stays');
    assert.deepEqual(again.log.first_opened_at, c.log.first_opened_at);
    assert.equal((await eventsOf(t.database.db, teamId, 'email.opened')).length, 1);
    assert.equal((await hitsOf(t.database.db, send.id)).length, 2, 'the repeat is stored, without an event');
  });

  test('bad signature, wrong kind, unknown id or malformed path: still the GIF, nothing recorded', async () => {
    const { teamId, send } = await makeSend(t);
    const good = new URL(links.openPixelUrl(send.id)).pathname;
    const sig = good.split('/')[4]!.replace('.gif', '');
    const paths = [
      good.replace(/[A-Za-z0-9_-]{4}\.gif$/, 'AAAA.gif'),
      `/t/o/${send.id}/${links.sign('click', send.id)}.gif`,
      `/t/o/${send.id}/${sig}`, // no .gif
      `/t/o/0190a7e2-0000-7000-8000-000000000001/${links.sign('open', '0190a7e2-0000-7000-8000-000000000001')}.gif`,
      '/t/o/not-a-uuid/xyz.gif',
      `/t/o/${'x'.repeat(150)}/${'y'.repeat(150)}.gif`,
      '/t/o/%00/x.gif',
    ];
    for (const p of paths) assertPixel(await open(p));
    // Paths the router itself refuses (bad percent-encoding, a segment over
    // maxParamLength) are a 4xx before any route runs; never a 500.
    for (const p of ['/t/o/a/%E0%A4%A.gif', `/t/o/a/${'y'.repeat(300)}.gif`]) {
      const res = await open(p);
      assert.ok(res.statusCode >= 400 && res.statusCode < 500, `${p}: ${res.statusCode}`);
    }
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
    assert.deepEqual(await hitsOf(t.database.db, send.id), []);
    assert.equal((await countersOf(t.database.db, send)).log.opens_count, 0);
  });

  test('open_tracking false: the GIF, and nothing recorded', async () => {
    const { teamId, send } = await makeSend(t, { openTracking: false });
    assertPixel(await open(pathOf(links.openPixelUrl(send.id))));
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
    assert.deepEqual(await hitsOf(t.database.db, send.id), []);
    assert.equal((await countersOf(t.database.db, send)).contact!.opens_count, 0);
  });

  async function assertBotOpen(opts: { sentSecondsAgo?: number; ua?: string | null; method?: 'GET' | 'HEAD'; ip?: string }, reason: string) {
    const { teamId, send } = await makeSend(t, { sentSecondsAgo: opts.sentSecondsAgo });
    const res = await open(pathOf(links.openPixelUrl(send.id)), opts);
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'image/gif');
    const events = await eventsOf(t.database.db, teamId);
    assert.deepEqual(events.map((e) => e.name), ['email.bot.opened']);
    const p = events[0]!.payload as Record<string, any>;
    assert.equal(p.email_send_log_id, send.id);
    assert.equal(p.email, send.email);
    assert.match(String(p.opened_at), ISO_MS);
    assert.equal(p.decision.is_bot, true);
    assert.ok(p.decision.bot_score >= 0.5 && p.decision.bot_score <= 1);
    assert.ok(p.decision.reasons.includes(reason), JSON.stringify(p.decision));
    const c = await countersOf(t.database.db, send);
    assert.deepEqual([c.log.opens_count, c.contact!.opens_count, c.contact!.first_opened_at], [0, 0, null], 'no engagement counted');
    const [hit] = await hitsOf(t.database.db, send.id);
    assert.equal(hit!.is_bot, true);
    assert.ok(hit!.reasons.includes(reason));
    return { p, hit: hit! };
  }

  test('bot user agent → email.bot.opened (bot_user_agent), counters unchanged', async () => {
    const { p } = await assertBotOpen({ ua: 'python-requests/2.32.3' }, 'bot_user_agent');
    assert.equal(p.user_agent, 'python-requests/2.32.3');
  });

  test('HEAD → email.bot.opened (head_request), and a GIF header without body', async () => {
    const { send } = await makeSend(t);
    const res = await open(pathOf(links.openPixelUrl(send.id)), { method: 'HEAD' });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'image/gif');
    assert.equal(res.body, '');
    await assertBotOpen({ method: 'HEAD' }, 'head_request');
  });

  test('an open seconds after sending → email.bot.opened (immediate_after_send)', async () => {
    await assertBotOpen({ sentSecondsAgo: 1 }, 'immediate_after_send');
  });

  test('Apple Mail Privacy Protection prefetch → email.bot.opened (apple_privacy_proxy)', async () => {
    const { hit } = await assertBotOpen({ ua: 'Mozilla/5.0', ip: '17.58.100.1' }, 'apple_privacy_proxy');
    assert.equal(hit.fingerprint, 'apple_privacy_proxy');
  });

  test('security scanner user agent → email.bot.opened (security_scanner)', async () => {
    const { hit } = await assertBotOpen({ ua: 'Barracuda Sentinel (EE)' }, 'security_scanner');
    assert.equal(hit.fingerprint, 'barracuda');
  });

  test('no user agent → email.bot.opened (missing_user_agent), user_agent null', async () => {
    const { p } = await assertBotOpen({ ua: null }, 'missing_user_agent');
    assert.equal(p.user_agent, null);
  });

  test("Gmail's image proxy is a person's open", async () => {
    const { teamId, send } = await makeSend(t);
    const ua = 'Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)';
    await open(pathOf(links.openPixelUrl(send.id)), { ua, ip: '66.249.84.1' });
    assert.deepEqual((await eventsOf(t.database.db, teamId)).map((e) => e.name), ['email.opened']);
    assert.equal((await countersOf(t.database.db, send)).contact!.opens_count, 1);
    assert.equal((await hitsOf(t.database.db, send.id))[0]!.fingerprint, 'google_image_proxy');
  });

  test('a send whose contact was deleted still records, with contact_id and country_code null', async () => {
    const { teamId, send } = await makeSend(t, { contactId: null });
    await open(pathOf(links.openPixelUrl(send.id)));
    const [e] = await eventsOf(t.database.db, teamId);
    assert.equal(e!.name, 'email.opened');
    assert.equal((e!.payload as Record<string, unknown>).contact_id, null);
    assert.equal((e!.payload as Record<string, unknown>).country_code, null);
    assert.equal((await countersOf(t.database.db, send)).log.opens_count, 1);
  });

  test("another team's contact with the same address is not touched", async () => {
    const { send } = await makeSend(t, { email: 'same@example.com' });
    const other = await makeSend(t, { email: 'same@example.com' });
    await open(pathOf(links.openPixelUrl(send.id)));
    assert.equal((await countersOf(t.database.db, other.send)).contact!.opens_count, 0);
    assert.deepEqual(await eventsOf(t.database.db, other.teamId), []);
    assert.ok(await insertContact(t.database.db, other.teamId, 'unrelated@example.com'));
  });
});
