import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { BROWSER_UA, countersOf, eventsOf, hitsOf, makeSend, pathOf, testLinks } from './fixtures.ts';

const links = testLinks();
const TARGET = 'https://shop.example.com/item?id=42&ref=mail#top';

describe('click redirect and honeypot', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const get = (url: string, opts: { ua?: string; method?: 'GET' | 'HEAD'; ip?: string } = {}) =>
    t.app.inject({ method: opts.method ?? 'GET', url, headers: { 'user-agent': opts.ua ?? BROWSER_UA }, remoteAddress: opts.ip ?? '198.51.100.4' });
  const click = (sendId: string, target = TARGET, opts: Parameters<typeof get>[1] = {}) => get(pathOf(links.clickUrl(sendId, target)), opts);

  function assertNotFoundPage(res: Awaited<ReturnType<typeof get>>) {
    assert.equal(res.statusCode, 404);
    assert.equal(res.headers.location, undefined, 'never a redirect');
    assert.match(String(res.headers['content-type']), /^text\/html/);
    assert.match(res.body, /Link not found/);
  }

  test('a valid click redirects (302) to exactly the signed URL', async () => {
    const { send } = await makeSend(t);
    const res = await click(send.id);
    assert.equal(res.statusCode, 302);
    assert.equal(res.headers.location, TARGET);
    assert.match(String(res.headers['cache-control']), /no-store/);
    assert.equal(res.headers['referrer-policy'], 'no-referrer', 'the signed URL does not leak to the target');
  });

  test('no open redirect: tampered, missing, repeated or foreign u, and tampered signatures are 404 pages', async () => {
    const { teamId, send } = await makeSend(t);
    const good = new URL(links.clickUrl(send.id, TARGET));
    const sig = good.pathname.split('/')[4]!;
    const base = `/t/c/${send.id}/${sig}`;
    const cases = [
      `${base}?u=${encodeURIComponent('https://evil.example.net/')}`,
      `${base}?u=${encodeURIComponent(TARGET + 'x')}`,
      `${base}?u=${encodeURIComponent(TARGET.toUpperCase())}`,
      base,
      `${base}?u=`,
      `${base}?u=${encodeURIComponent(TARGET)}&u=${encodeURIComponent('https://evil.example.net/')}`,
      `${base}?v=${encodeURIComponent(TARGET)}`,
      // The first character: the last one of 16 bytes in base64url is one of 4 (A, Q, g, w), so 'A' there was the real signature 1 time in 4.
      `/t/c/${send.id}/${sig[0] === 'A' ? 'B' : 'A'}${sig.slice(1)}?u=${encodeURIComponent(TARGET)}`,
      `/t/c/${send.id}/${links.sign('open', send.id)}?u=${encodeURIComponent(TARGET)}`,
      `/t/c/not-a-uuid/${sig}?u=${encodeURIComponent(TARGET)}`,
      `${base}?u=${'%41'.repeat(4000)}`,
      `${base}?u=%E0%A4%A`,
    ];
    for (const c of cases) assertNotFoundPage(await get(c));
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
    assert.deepEqual(await hitsOf(t.database.db, send.id), []);
  });

  test('a signed non-http(s) target is refused, not redirected to', async () => {
    const { send } = await makeSend(t);
    for (const target of ['javascript:alert(1)', 'data:text/html,hi', 'mailto:a@example.com', 'ftp://example.com/f', 'not a url']) {
      assertNotFoundPage(await click(send.id, target));
    }
  });

  test('a valid signature for a send that no longer exists (retention) still redirects; nothing is recorded', async () => {
    const id = '0190a7e2-0000-7000-8000-0000000000aa';
    const res = await click(id);
    assert.equal(res.statusCode, 302);
    assert.equal(res.headers.location, TARGET);
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM tracking_hits WHERE email_send_log_id = ${id}::uuid`.execute(t.database.db);
    assert.equal(rows[0]!.n, 0);
  });

  test('a target with characters a header cannot carry goes out percent-encoded, same resource', async () => {
    const { send } = await makeSend(t);
    const res = await click(send.id, 'https://example.com/ünï code?q=a b');
    assert.equal(res.statusCode, 302);
    assert.equal(res.headers.location, 'https://example.com/%C3%BCn%C3%AF%20code?q=a%20b');
    // Even a signed target with a line break cannot split the response headers.
    const split = await click(send.id, 'https://example.com/a\r\nSet-Cookie: x=1');
    assert.equal(split.statusCode, 302);
    assert.equal(split.headers['set-cookie'], undefined);
    assert.equal(split.headers.location, 'https://example.com/aSet-Cookie:%20x=1');
  });

  test("a person's click counts and emits email.clicked with the 6.3 payload", async () => {
    const { teamId, send } = await makeSend(t);
    await t.database.db.updateTable('contacts').set({ country_code: 'FR' }).where('id', '=', send.contactId!).execute();
    assert.equal((await click(send.id)).statusCode, 302);
    const c = await countersOf(t.database.db, send);
    assert.deepEqual([c.log.clicks_count, c.contact!.clicks_count, c.log.opens_count], [1, 1, 0]);
    assert.ok(c.log.first_clicked_at && c.contact!.first_clicked_at && c.contact!.last_clicked_at);
    const events = await eventsOf(t.database.db, teamId);
    assert.deepEqual(events.map((e) => e.name), ['email.clicked']);
    const p = events[0]!.payload as Record<string, unknown>;
    assert.deepEqual(p, {
      email_send_log_id: send.id,
      contact_id: send.contactId,
      email: send.email,
      clicked_at: p.clicked_at,
      url: TARGET,
      ip_address: '198.51.100.4',
      user_agent: BROWSER_UA,
      country_code: 'FR',
      short_link_id: null,
    });
    assert.match(String(p.clicked_at), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    // The same link again (a double click) is still a person, but within the
    // hour it does not count again: only the raw total moves.
    assert.equal((await click(send.id)).statusCode, 302);
    assert.deepEqual((await eventsOf(t.database.db, teamId)).map((e) => e.name), ['email.clicked']);
    const again = await countersOf(t.database.db, send);
    assert.deepEqual([again.log.clicks_count, again.contact!.clicks_count, again.log.click_hits_count], [1, 1, 2]);
    const hits = await hitsOf(t.database.db, send.id);
    assert.deepEqual(hits.map((h) => [h.is_bot, h.event_id === null]), [[false, false], [false, true]]);
  });

  test('click_tracking false: still redirects, records nothing', async () => {
    const { teamId, send } = await makeSend(t, { clickTracking: false });
    const res = await click(send.id);
    assert.equal(res.statusCode, 302);
    assert.equal(res.headers.location, TARGET);
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
    assert.deepEqual(await hitsOf(t.database.db, send.id), []);
  });

  async function assertBotClick(teamId: string, sendId: string, reason: string, index = 0) {
    const events = await eventsOf(t.database.db, teamId);
    const e = events[index]!;
    assert.equal(e.name, 'email.bot.clicked', JSON.stringify(events.map((x) => [x.name, (x.payload as any).decision])));
    const p = e.payload as Record<string, any>;
    assert.equal(p.email_send_log_id, sendId);
    assert.equal(p.short_link_id, null);
    assert.equal(p.decision.is_bot, true);
    assert.ok(p.decision.reasons.includes(reason), JSON.stringify(p.decision));
    return p;
  }

  const strong: [string, Parameters<typeof get>[1], { sentSecondsAgo?: number }, string][] = [
    ['bot user agent', { ua: 'Go-http-client/1.1' }, {}, 'bot_user_agent'],
    ['HEAD request', { method: 'HEAD' }, {}, 'head_request'],
    ['click seconds after sending', {}, { sentSecondsAgo: 2 }, 'immediate_after_send'],
    ['security scanner UA', { ua: 'Mozilla/5.0 (compatible; Mimecast URL Protect)' }, {}, 'security_scanner'],
  ];
  for (const [name, reqOpts, sendOpts, reason] of strong) {
    test(`${name} → email.bot.clicked (${reason}), redirect kept, counters unchanged`, async () => {
      const { teamId, send } = await makeSend(t, sendOpts);
      const res = await click(send.id, TARGET, reqOpts);
      assert.equal(res.statusCode, 302);
      assert.equal(res.headers.location, TARGET);
      const p = await assertBotClick(teamId, send.id, reason);
      assert.equal(p.url, TARGET);
      const c = await countersOf(t.database.db, send);
      assert.deepEqual([c.log.clicks_count, c.contact!.clicks_count, c.contact!.first_clicked_at], [0, 0, null]);
    });
  }

  test('rapid multi-click: other links of the message within 2 s are bot clicks', async () => {
    const { teamId, send } = await makeSend(t);
    await click(send.id, 'https://a.example.com/1');
    await click(send.id, 'https://a.example.com/2');
    await click(send.id, 'https://a.example.com/3');
    const events = await eventsOf(t.database.db, teamId);
    assert.deepEqual(events.map((e) => e.name), ['email.clicked', 'email.bot.clicked', 'email.bot.clicked']);
    const [, second, third] = events.map((e) => (e.payload as any).decision);
    assert.deepEqual(second.reasons, ['rapid_multi_click']);
    assert.ok(third.bot_score > second.bot_score, 'a longer burst weighs more');
    assert.equal((await countersOf(t.database.db, send)).contact!.clicks_count, 1);
  });

  test('concurrent clicks on every link are scored one after another (row lock): one person at most', async () => {
    const { teamId, send } = await makeSend(t);
    const results = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => click(send.id, `https://b.example.com/${i}`)));
    assert.ok(results.every((r) => r.statusCode === 302));
    const names = (await eventsOf(t.database.db, teamId)).map((e) => e.name);
    assert.equal(names.length, 6);
    assert.equal(names.filter((n) => n === 'email.clicked').length, 1, names.join());
    assert.equal((await countersOf(t.database.db, send)).log.clicks_count, 1);
  });

  test('honeypot: 200 empty page, email.bot.clicked (honeypot), and later clicks of the send are bots', async () => {
    const { teamId, send } = await makeSend(t);
    const res = await get(pathOf(links.honeypotUrl(send.id)), { ip: '192.0.2.50' });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^text\/html/);
    assert.doesNotMatch(res.body, /<a /, 'nothing to follow');
    const p = await assertBotClick(teamId, send.id, 'honeypot');
    assert.equal(p.url, null);
    assert.equal(p.decision.bot_score, 1);

    // A browser UA from another address right after: the scanner's own pass.
    await click(send.id, TARGET, { ip: '192.0.2.51' });
    await assertBotClick(teamId, send.id, 'honeypot_followed', 1);
    const opened = await get(pathOf(links.openPixelUrl(send.id)), { ip: '192.0.2.52' });
    assert.equal(opened.statusCode, 200);
    assert.equal((await eventsOf(t.database.db, teamId, 'email.bot.opened')).length, 1, 'opens in the window too');
    const c = await countersOf(t.database.db, send);
    assert.deepEqual([c.contact!.clicks_count, c.contact!.opens_count], [0, 0]);
  });

  test('honeypot: past the window, only hits from the same address are marked', async () => {
    const { teamId, send } = await makeSend(t);
    await get(pathOf(links.honeypotUrl(send.id)), { ip: '192.0.2.60' });
    await t.database.db
      .updateTable('tracking_hits')
      .set({ created_at: new Date(Date.now() - 3600_000) })
      .where('email_send_log_id', '=', send.id)
      .execute();
    await click(send.id, TARGET, { ip: '192.0.2.61' });
    await click(send.id, 'https://other.example.com/', { ip: '192.0.2.60' });
    const names = (await eventsOf(t.database.db, teamId)).map((e) => e.name);
    // The two real links are 2 s apart at most here, so the second is also a rapid click;
    // what matters is that the first, from another address, is a person.
    assert.deepEqual(names, ['email.bot.clicked', 'email.clicked', 'email.bot.clicked']);
    await assertBotClick(teamId, send.id, 'honeypot_followed', 2);
  });

  test('honeypot: after 24 h even the same address is judged afresh', async () => {
    const { teamId, send } = await makeSend(t, { sentSecondsAgo: 2 * 86_400 });
    await get(pathOf(links.honeypotUrl(send.id)), { ip: '192.0.2.70' });
    await t.database.db
      .updateTable('tracking_hits')
      .set({ created_at: new Date(Date.now() - 25 * 3600_000) })
      .where('email_send_log_id', '=', send.id)
      .execute();
    await click(send.id, TARGET, { ip: '192.0.2.70' });
    assert.deepEqual((await eventsOf(t.database.db, teamId)).map((e) => e.name), ['email.bot.clicked', 'email.clicked']);
  });

  test('honeypot with a bad signature: the same page, nothing recorded', async () => {
    const { teamId, send } = await makeSend(t);
    const res = await get(`/t/h/${send.id}/${links.sign('click', send.id)}`);
    assert.equal(res.statusCode, 200);
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
    assert.deepEqual(await hitsOf(t.database.db, send.id), []);
  });

  test('honeypot on a message without click tracking: kept as evidence, not reported', async () => {
    const { teamId, send } = await makeSend(t, { clickTracking: false });
    assert.equal((await get(pathOf(links.honeypotUrl(send.id)))).statusCode, 200);
    assert.deepEqual(await eventsOf(t.database.db, teamId), []);
    const hits = await hitsOf(t.database.db, send.id);
    assert.deepEqual(hits.map((h) => [h.kind, h.is_bot, h.event_id]), [['honeypot', true, null]]);
    // The evidence still marks an open of the same pass.
    await get(pathOf(links.openPixelUrl(send.id)));
    assert.deepEqual((await eventsOf(t.database.db, teamId)).map((e) => e.name), ['email.bot.opened']);
  });
});
