// Replayed tracking links (regression: one replay loop added 2,629 opens, each
// with an event and a webhook delivery). Counting is once per (message, link,
// verdict) per hour; every hit is answered and raises the message's raw total;
// hit rows per message are capped; only bad links are limited per IP.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { buildTaskList } from '../../src/tasks.ts';
import { PREPARED } from '../../src/db/pool.ts';
import { PIXEL_GIF } from '../../src/mail/tracking-routes.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { signedIn } from '../dashboard/session.ts';
import { captured } from '../lib/statements.ts';
import { BROWSER_UA, countersOf, eventsOf, hitsOf, insertSend, pathOf, testLinks, type Send } from './fixtures.ts';

const links = testLinks();
const TARGET = 'https://example.com/offer?a=1';
const OTHER = 'https://example.com/other';
const SCANNER_UA = 'Mozilla/5.0 (compatible; Barracuda Sentinel)';

/** Runs `n` requests, `concurrency` at a time, and returns their answers. */
async function replay<T>(n: number, concurrency: number, fire: (i: number) => Promise<T>): Promise<T[]> {
  const out = Array.from<T>({ length: n });
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) out[i] = await fire(i);
    }),
  );
  return out;
}

describe('tracking replay: counted once per link, verdict and hour', () => {
  let t: TestApp;
  before(async () => {
    // Webhooks to 127.0.0.1 are allowed so one can be created; nothing is dispatched here.
    t = await buildTestApp({ config: { allowedPrivateTargets: ['127.0.0.1'] } });
  });
  after(() => t.close());
  const db = () => t.database.db;

  const get = (url: string, opts: { ua?: string; ip?: string } = {}) =>
    t.app.inject({ method: 'GET', url: pathOf(url), headers: { 'user-agent': opts.ua ?? BROWSER_UA }, remoteAddress: opts.ip ?? '198.51.100.7' });

  /** A team with a webhook on the tracking events and one sent message. */
  async function setup(): Promise<{ teamId: string; send: Send }> {
    const { teamId, key } = await makeTeam(db());
    const hook = await t.app.inject({
      method: 'POST',
      url: '/public/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: { url: 'http://127.0.0.1:9/hook', events: ['email.opened', 'email.clicked', 'email.bot.opened', 'email.bot.clicked'] },
    });
    assert.equal(hook.statusCode, 201, hook.body);
    return { teamId, send: await insertSend(db(), teamId) };
  }

  /** Fans the team's events out to its webhooks (the process_events job) and counts the deliveries. */
  async function deliveries(teamId: string): Promise<number> {
    const task = buildTaskList({ db: db(), config: testConfig() }).process_events as (p: unknown, h: unknown) => Promise<void>;
    await task({ event_ids: (await eventsOf(db(), teamId)).map((e) => e.id) }, {});
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE team_id = ${teamId}`.execute(db());
    return rows[0]!.n;
  }

  /** Moves the message's tracking history back in time, as if `seconds` had passed. */
  async function age(send: Send, seconds: number): Promise<void> {
    const by = sql`make_interval(secs => ${seconds}::float8)`;
    await sql`UPDATE tracking_counted SET counted_at = counted_at - ${by} WHERE email_send_log_id = ${send.id}`.execute(db());
    await sql`UPDATE tracking_hits SET created_at = created_at - ${by} WHERE email_send_log_id = ${send.id}`.execute(db());
    await sql`UPDATE email_send_log SET sent_at = sent_at - ${by} WHERE id = ${send.id}`.execute(db());
  }

  test('500 replayed opens: every one answered with the pixel, counted once (one event, one webhook delivery), raw total 500', async () => {
    const { teamId, send } = await setup();
    const t0 = performance.now();
    const rss0 = process.memoryUsage.rss();
    const answers = await replay(500, 10, () => get(links.openPixelUrl(send.id)));
    const ms = performance.now() - t0;
    const grown = (process.memoryUsage.rss() - rss0) / 2 ** 20;
    for (const res of answers) {
      assert.equal(res.statusCode, 200);
      assert.deepEqual(res.rawPayload, PIXEL_GIF);
    }
    const c = await countersOf(db(), send);
    assert.deepEqual([c.log.opens_count, c.contact!.opens_count, c.log.open_hits_count, c.log.click_hits_count], [1, 1, 500, 0]);
    assert.ok(c.log.first_opened_at && c.contact!.first_opened_at);
    assert.deepEqual((await eventsOf(db(), teamId)).map((e) => e.name), ['email.opened']);
    assert.equal(await deliveries(teamId), 1);
    const hits = await hitsOf(db(), send.id);
    assert.equal(hits.length, 500, 'under the cap every hit is stored');
    assert.equal(hits.filter((h) => h.event_id !== null).length, 1);
    assert.ok(ms < 60_000, `500 hits took ${Math.round(ms)} ms`);
    assert.ok(grown < 256, `the process grew by ${grown.toFixed(0)} MiB`);
  });

  test('500 replayed clicks of one link: 500 redirects, counted once; a second link of the message counts on its own', async () => {
    const { teamId, send } = await setup();
    const answers = await replay(500, 10, () => get(links.clickUrl(send.id, TARGET)));
    for (const res of answers) {
      assert.equal(res.statusCode, 302);
      assert.equal(res.headers.location, TARGET);
    }
    let c = await countersOf(db(), send);
    assert.deepEqual([c.log.clicks_count, c.contact!.clicks_count, c.log.click_hits_count, c.log.opens_count], [1, 1, 500, 0]);
    assert.deepEqual((await eventsOf(db(), teamId)).map((e) => e.name), ['email.clicked']);

    // Later than the 2 s burst window (a person moving on to the next link).
    await age(send, 10);
    for (let i = 0; i < 3; i++) assert.equal((await get(links.clickUrl(send.id, OTHER))).statusCode, 302);
    c = await countersOf(db(), send);
    assert.deepEqual([c.log.clicks_count, c.contact!.clicks_count, c.log.click_hits_count], [2, 2, 503]);
    const events = await eventsOf(db(), teamId, 'email.clicked');
    assert.deepEqual(events.map((e) => (e.payload as { url: string }).url), [TARGET, OTHER]);
    assert.equal(await deliveries(teamId), 2);
  });

  test('a repeat of a counted link costs two statements, no transaction: the read that decides it and the raw total with its hit row', async () => {
    const { send } = await setup();
    const loops = [
      { url: links.openPixelUrl(send.id), status: 200 },
      { url: links.clickUrl(send.id, TARGET), status: 302 },
    ];
    for (const { url, status } of loops) {
      assert.equal((await get(url)).statusCode, status); // the first hit counts
      const sent = await captured(/./, async () => assert.equal((await get(url)).statusCode, status));
      // Both prepared (src/db/pool.ts): a replay loop runs them over and over.
      const bare = sent.map((s) => s.text.trim());
      assert.deepEqual(bare.map((t) => t.startsWith(PREPARED)), [true, true], `statements of one repeat: ${bare.map((t) => t.slice(0, 60)).join(' | ')}`);
      assert.deepEqual(sent.map((s) => (s.name ?? '').startsWith('plover_')), [true, true], 'sent as named statements');
      assert.deepEqual(
        bare.map((t) => t.slice(PREPARED.length).trim().split(/\s+/)[0]!.toUpperCase()),
        ['SELECT', 'WITH'],
        `statements of one repeat: ${bare.map((t) => t.slice(0, 60)).join(' | ')}`,
      );
      // ...committed without waiting for the WAL flush, as the transaction it replaced was.
      assert.match(sent[1]!.text, /set_config\('synchronous_commit', 'off', true\)/);
    }
    const c = await countersOf(db(), send);
    // 2 opens (1 counted) and 2 clicks (1 counted): the repeats still raise the raw totals and store their rows.
    assert.deepEqual([c.log.opens_count, c.log.open_hits_count, c.log.clicks_count, c.log.click_hits_count], [1, 2, 1, 2]);
    assert.equal((await hitsOf(db(), send.id)).length, 4);
  });

  test("a counted hit moves the contact's counters in the statement that stores the hit, not in one of its own", async () => {
    const { send } = await setup();
    const sent = await captured(/./, async () => assert.equal((await get(links.openPixelUrl(send.id))).statusCode, 200));
    assert.deepEqual(sent.filter((s) => /^\s*update\s+contacts/i.test(s.text)).map((s) => s.text.slice(0, 60)), []);
    assert.ok(sent.some((s) => /update contacts set opens_count/i.test(s.text.replace(/\s+/g, ' '))), 'the contact is counted');
    const c = await countersOf(db(), send);
    assert.deepEqual([c.log.opens_count, c.contact!.opens_count, c.log.open_hits_count], [1, 1, 1]);
    assert.ok(c.contact!.first_opened_at && c.contact!.last_opened_at);
  });

  test('an hour later the same link counts again; within the hour it does not; first_opened_at keeps the first', async () => {
    const { teamId, send } = await setup();
    await get(links.openPixelUrl(send.id));
    const first = await countersOf(db(), send);
    await age(send, 59 * 60);
    await get(links.openPixelUrl(send.id));
    assert.equal((await countersOf(db(), send)).log.opens_count, 1, '59 minutes later: still the same hour');
    await age(send, 2 * 60);
    await get(links.openPixelUrl(send.id));
    await get(links.openPixelUrl(send.id));
    const c = await countersOf(db(), send);
    assert.deepEqual([c.log.opens_count, c.contact!.opens_count, c.log.open_hits_count], [2, 2, 4]);
    assert.equal((await eventsOf(db(), teamId, 'email.opened')).length, 2);
    assert.deepEqual(c.contact!.first_opened_at, first.contact!.first_opened_at, 'first open kept');
    assert.ok(c.contact!.last_opened_at! > first.contact!.last_opened_at!, 'last open moved to the counted one');
    assert.deepEqual(c.log.first_opened_at, first.log.first_opened_at);
  });

  test("a bot's hits and a person's hits of the same link each count once for their verdict", async () => {
    const { teamId, send } = await setup();
    for (let i = 0; i < 4; i++) {
      await get(links.openPixelUrl(send.id), { ua: SCANNER_UA });
      await get(links.openPixelUrl(send.id));
    }
    for (let i = 0; i < 3; i++) await get(links.clickUrl(send.id, TARGET), { ua: SCANNER_UA });
    await age(send, 10);
    for (let i = 0; i < 3; i++) await get(links.clickUrl(send.id, TARGET));
    const names = (await eventsOf(db(), teamId)).map((e) => e.name).sort();
    assert.deepEqual(names, ['email.bot.clicked', 'email.bot.opened', 'email.clicked', 'email.opened']);
    const c = await countersOf(db(), send);
    assert.deepEqual([c.log.opens_count, c.log.clicks_count, c.log.open_hits_count, c.log.click_hits_count], [1, 1, 8, 6]);
    const hits = await hitsOf(db(), send.id);
    assert.equal(hits.length, 14);
    assert.equal(hits.filter((h) => h.is_bot).length, 7, 'every hit keeps its own decision');
  });

  test('stored hit rows per message are capped (TRACKING_MAX_HITS_PER_MESSAGE); past the cap hits still count in the raw totals', async () => {
    const capped = await buildTestApp({ database: t.database, config: { trackingMaxHitsPerMessage: 20 } });
    try {
      const { teamId } = await makeTeam(db());
      const send = await insertSend(db(), teamId);
      const hit = (url: string) => capped.app.inject({ method: 'GET', url: pathOf(url), headers: { 'user-agent': BROWSER_UA } });
      await replay(30, 5, () => hit(links.openPixelUrl(send.id)));
      await age(send, 10);
      await replay(10, 5, () => hit(links.clickUrl(send.id, TARGET)));
      const c = await countersOf(db(), send);
      assert.deepEqual([c.log.open_hits_count, c.log.click_hits_count, c.log.opens_count, c.log.clicks_count], [30, 10, 1, 1]);
      assert.equal((await hitsOf(db(), send.id)).length, 20);
      assert.deepEqual((await eventsOf(db(), teamId)).map((e) => e.name), ['email.opened', 'email.clicked'], 'counting goes on past the cap');
    } finally {
      await capped.close();
    }
  });

  test('bad links are limited per IP (TRACKING_BAD_LINKS_PER_MINUTE): a bare 429 past the limit, while valid links from that IP are answered and counted', async () => {
    const limited = await buildTestApp({ database: t.database, config: { trackingBadLinksPerMinute: 5 } });
    try {
      const { teamId } = await makeTeam(db());
      const send = await insertSend(db(), teamId);
      const from = (ip: string, url: string) => limited.app.inject({ method: 'GET', url, headers: { 'user-agent': BROWSER_UA }, remoteAddress: ip });
      const forged = `/t/o/${send.id}/${'A'.repeat(22)}.gif`;
      const unknown = pathOf(links.openPixelUrl('01900000-0000-7000-8000-000000000000'));
      for (let i = 0; i < 4; i++) assert.equal((await from('203.0.113.50', forged)).statusCode, 200, 'within the limit: the usual pixel');
      assert.equal((await from('203.0.113.50', unknown)).statusCode, 200, 'a signed link to no message is a bad link too');

      const refused = await from('203.0.113.50', forged);
      assert.equal(refused.statusCode, 429);
      assert.ok(Number(refused.headers['retry-after']) > 0);
      assert.match(String(refused.headers['content-type']), /^text\/plain/);
      assert.equal((await from('203.0.113.50', `/t/c/${send.id}/bad?u=${encodeURIComponent(TARGET)}`)).statusCode, 429);
      assert.equal((await from('203.0.113.50', `/u/${send.id}/bad`)).statusCode, 429);
      assert.equal((await from('203.0.113.50', '/t/h/not-a-uuid/x')).statusCode, 429);

      // Valid links from the same address: answered and counted, however many.
      for (let i = 0; i < 10; i++) {
        const pixel = await from('203.0.113.50', pathOf(links.openPixelUrl(send.id)));
        assert.equal(pixel.statusCode, 200);
        assert.deepEqual(pixel.rawPayload, PIXEL_GIF);
      }
      assert.equal((await from('203.0.113.50', pathOf(links.clickUrl(send.id, TARGET)))).statusCode, 302);
      assert.equal((await from('203.0.113.50', pathOf(links.unsubscribeUrl(send.id)))).statusCode, 200);
      const c = await countersOf(db(), send);
      assert.deepEqual([c.log.opens_count, c.log.open_hits_count], [1, 10]);

      // Another address has its own budget.
      assert.equal((await from('203.0.113.51', forged)).statusCode, 200);
      assert.equal((await from('203.0.113.51', `/u/${send.id}/bad`)).statusCode, 404);
      assert.equal((await hitsOf(db(), send.id)).every((h) => h.ip === '203.0.113.50'), true, 'bad links record nothing');
    } finally {
      await limited.close();
    }
  });

  test("the dashboard's contact page shows each message's counted opens and clicks beside its raw hits", async () => {
    const { teamId, session } = await signedIn(t.app, db());
    const send = await insertSend(db(), teamId);
    await sql`UPDATE email_send_log SET subject = 'Spring <sale>' WHERE id = ${send.id}`.execute(db());
    await replay(7, 3, () => get(links.openPixelUrl(send.id)));
    await replay(3, 3, () => get(links.clickUrl(send.id, TARGET)));
    const page = await session.get(`/contacts/${send.contactId}`);
    assert.equal(page.statusCode, 200);
    const row = page.body.match(/<tr><td>Spring &lt;sale&gt;<\/td>.*?<\/tr>/)?.[0];
    assert.ok(row, 'a row for the message, subject escaped');
    const numbers = [...row.matchAll(/<td class="num">(\d+)<\/td>/g)].map((m) => Number(m[1]));
    assert.deepEqual(numbers, [1, 7, 1, 3], 'opens, open hits, clicks, click hits');
  });
});
