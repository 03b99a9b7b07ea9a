// The dashboard's shell: the overview home page (its counts, scoped by team),
// team settings (the name recipients read on the unsubscribe page), the HTML
// 404 and 405 pages for browsers, the favicon and the navigation list.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { insertSend, pathOf, testLinks } from '../tracking/fixtures.ts';
import { NAV } from '../../src/dashboard/nav.ts';
import { overview } from '../../src/dashboard/overview.ts';
import { addMessageFacts } from '../../src/stats/deltas.ts';
import { foldStats } from '../../src/stats/fold.ts';
import { signedIn } from './session.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
});
after(async () => t?.close());

const HTML = { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' };

/** The number in the overview card whose label follows it. */
const card = (body: string, label: string): string | undefined =>
  new RegExp(`<span class="big">([0-9+]+)</span> ${label}`).exec(body)?.[1];
/** The cells of the day row `day` in the overview's table. */
const dayRow = (body: string, day: string): string[] | undefined =>
  new RegExp(`<tr><td>${day}</td><td class="num">(\\d+)</td><td class="num">(\\d+)</td><td class="num">(\\d+)</td></tr>`).exec(body)?.slice(1);
const utcDay = (daysBack: number) => new Date(Date.now() - daysBack * 86_400_000).toISOString().slice(0, 10);

describe('overview', () => {
  test('signed out, / goes to sign-in; after sign-in the overview is the home page', async () => {
    const res = await t.app.inject({ url: '/' });
    assert.equal(res.statusCode, 303);
    assert.equal(res.headers.location, '/sign-in');
    const { session } = await signedIn(t.app, t.database.db);
    const home = await session.get('/');
    assert.equal(home.statusCode, 200);
    assert.match(home.body, /<h1>Overview<\/h1>/);
    assert.match(home.body, /<a href="\/" aria-current="page">Overview<\/a>/);
  });

  test("counts contacts, sends and opens by people and bots per day, failing webhooks and recent events, of the team's own only", async () => {
    const db = t.database.db;
    const a = await signedIn(t.app, db, 'Team A');
    const b = await signedIn(t.app, db, 'Team B');
    for (const team of [a, b]) {
      const bulk = await t.app.inject({
        method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': team.key },
        payload: { contacts: Array.from({ length: team === a ? 3 : 7 }, (_, i) => ({ email: `c${i}@example.com` })) },
      });
      assert.equal(bulk.statusCode, 200, bulk.body);
    }
    const unsub = await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/unsubscribe', headers: { 'x-api-key': a.key }, payload: { email: 'c0@example.com' } });
    assert.equal(unsub.statusCode, 200, unsub.body);
    // A: two messages sent today, one two days ago, one ten days ago (outside the window), one never sent.
    const today1 = await insertSend(db, a.teamId, { sentSecondsAgo: 1 });
    const today2 = await insertSend(db, a.teamId, { sentSecondsAgo: 2 });
    const older = await insertSend(db, a.teamId, { sentSecondsAgo: 2 * 86_400 });
    const tenDays = await insertSend(db, a.teamId, { sentSecondsAgo: 10 * 86_400 });
    await insertSend(db, a.teamId, { sentSecondsAgo: null });
    const bSend = await insertSend(db, b.teamId, { sentSecondsAgo: 1 });
    // The statistics' facts, as the send and tracking paths add them (stats/deltas.ts): the four sends
    // at their times; opens: today1 by a person and by a bot, today2 by a bot, older by a person two days
    // ago; a click is not an open.
    const ago = (s: number) => new Date(Date.now() - s * 1000);
    await addMessageFacts(db, [
      { messageId: today1.id, key: 'sent', at: ago(1) }, { messageId: today2.id, key: 'sent', at: ago(2) },
      { messageId: older.id, key: 'sent', at: ago(2 * 86_400) }, { messageId: tenDays.id, key: 'sent', at: ago(10 * 86_400) },
      { messageId: bSend.id, key: 'sent', at: ago(1) },
      { messageId: today1.id, key: 'opened_human', at: ago(0) }, { messageId: today1.id, key: 'opened_bot', at: ago(0) },
      { messageId: today1.id, key: 'clicked_human', at: ago(0) }, { messageId: today2.id, key: 'opened_bot', at: ago(0) },
      { messageId: older.id, key: 'opened_human', at: ago(2 * 86_400) },
    ]);
    // Webhooks: one failing, one fine, one disabled automatically; B's failing one is not A's.
    await sql`INSERT INTO webhooks (team_id, url, events, secret_enc, is_enabled, failing_since, auto_disabled_at) VALUES
      (${a.teamId}, 'https://a.example.com/1', '{email.sent}', '\\x00', true, now(), NULL),
      (${a.teamId}, 'https://a.example.com/2', '{email.sent}', '\\x00', true, NULL, NULL),
      (${a.teamId}, 'https://a.example.com/3', '{email.sent}', '\\x00', false, now(), now()),
      (${b.teamId}, 'https://b.example.com/1', '{email.sent}', '\\x00', true, now(), NULL)`.execute(db);

    const page = (await a.session.get('/')).body;
    // 3 from the bulk upsert plus the 5 contacts the sends made.
    assert.equal(card(page, 'contacts'), '8');
    assert.match(page, /1 unsubscribed/);
    assert.equal(card(page, 'e-mails sent'), '3');
    assert.equal(card(page, 'opened by people'), '2', 'today1 and older, each once');
    assert.match(page, /2 more by bots/);
    assert.deepEqual(dayRow(page, utcDay(0)), ['2', '1', '2']);
    assert.deepEqual(dayRow(page, utcDay(2)), ['1', '1', '0']);
    assert.deepEqual(dayRow(page, utcDay(1)), ['0', '0', '0']);
    assert.equal(dayRow(page, utcDay(7)), undefined, 'seven days, today included');
    assert.equal(card(page, 'webhooks failing'), '1');
    assert.match(page, /2 enabled, 1 disabled automatically/);
    assert.match(page, /<code>contact\.unsubscribed<\/code>/);
    assert.match(page, /c0@example\.com/);

    const other = (await b.session.get('/')).body;
    assert.equal(card(other, 'contacts'), '8', "B's 7 and its send's contact");
    assert.equal(card(other, 'e-mails sent'), '1');
    assert.equal(card(other, 'opened by people'), '0');
    assert.equal(card(other, 'webhooks failing'), '1');
    assert.doesNotMatch(other, /contact\.unsubscribed/);
  });

  test('contact counts stop at the cap ("N+"); mail counts are the statistics, exact at any size', async () => {
    const db = t.database.db;
    const team = await signedIn(t.app, db, 'Capped');
    // Sends today (3), two days ago (2) and five days ago (1); contacts 6 (one per send).
    const sends = [];
    for (const ago of [1, 2, 3, 2 * 86_400, 2 * 86_400 + 1, 5 * 86_400]) sends.push({ ago, send: await insertSend(db, team.teamId, { sentSecondsAgo: ago }) });
    await addMessageFacts(db, sends.map(({ ago, send }) => ({ messageId: send.id, key: 'sent' as const, at: new Date(Date.now() - ago * 1000) })));
    const exact = await overview(db, team.teamId, { cap: 10 });
    assert.equal(exact.totals.sent, '6');
    assert.equal(exact.contacts.total, '6');
    const cut = await overview(db, team.teamId, { cap: 4 });
    assert.equal(cut.contacts.total, '4+');
    assert.equal(cut.totals.sent, '6', 'mail counts are not capped');
    const byDay = Object.fromEntries(cut.days.map((d) => [d.day, d.sent]));
    assert.deepEqual([byDay[utcDay(0)], byDay[utcDay(1)], byDay[utcDay(2)], byDay[utcDay(5)], byDay[utcDay(6)]], ['3', '0', '2', '1', '0']);
    assert.equal(cut.days.length, 7);
    // Folded into the buckets, the same answer.
    await foldStats(db);
    assert.deepEqual(await overview(db, team.teamId, { cap: 4 }), { ...cut, recent: cut.recent });
  });
});

describe('team settings', () => {
  test('rename: the header, the page and the unsubscribe page recipients see show the new name', async () => {
    const db = t.database.db;
    const { session, teamId } = await signedIn(t.app, db, 'My team');
    const form = await session.get('/settings/team');
    assert.equal(form.statusCode, 200);
    assert.match(form.body, /value="My team"/);
    assert.ok(form.body.includes(teamId));
    const done = await session.post('/settings/team', { name: '  Acme <News>  ' });
    assert.equal(done.statusCode, 303);
    assert.equal(done.headers.location, '/settings/team?done=renamed');
    const after = await session.get('/settings/team?done=renamed');
    assert.match(after.body, /The team was renamed/);
    assert.match(after.body, /value="Acme &lt;News&gt;"/);
    assert.match(after.body, /· Acme &lt;News&gt;<\/span>/, 'the header names the team');
    const row = await db.selectFrom('teams').select('name').where('id', '=', teamId).executeTakeFirstOrThrow();
    assert.equal(row.name, 'Acme <News>');

    const send = await insertSend(db, teamId);
    const unsubscribe = await t.app.inject({ url: pathOf(testLinks().unsubscribeUrl(send.id)) });
    assert.equal(unsubscribe.statusCode, 200);
    assert.ok(unsubscribe.body.includes('Acme &lt;News&gt;'), unsubscribe.body);
  });

  test('an empty, too long or control-character name is 422 with the reason, and nothing changes', async () => {
    const db = t.database.db;
    const { session, teamId } = await signedIn(t.app, db, 'Kept');
    await session.get('/settings/team');
    for (const [name, why] of [['   ', /must be 1 to 200 characters/], ['x'.repeat(201), /must be 1 to 200 characters/], ['a\tb', /control characters/]] as const) {
      const res = await session.post('/settings/team', { name });
      assert.equal(res.statusCode, 422, name);
      assert.match(res.body, why);
      assert.match(res.body, /aria-invalid="true"/);
    }
    const row = await db.selectFrom('teams').select('name').where('id', '=', teamId).executeTakeFirstOrThrow();
    assert.equal(row.name, 'Kept');
  });

  test('signed out, the form is not read and nothing is renamed; a forged CSRF token is 403', async () => {
    const db = t.database.db;
    const { session, teamId } = await signedIn(t.app, db, 'Safe');
    const res = await t.app.inject({ method: 'POST', url: '/settings/team', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'name=Hijacked' });
    assert.equal(res.statusCode, 303);
    assert.equal(res.headers.location, '/sign-in');
    assert.equal((await session.post('/settings/team', { name: 'Hijacked', _csrf: 'forged' })).statusCode, 403);
    const row = await db.selectFrom('teams').select('name').where('id', '=', teamId).executeTakeFirstOrThrow();
    assert.equal(row.name, 'Safe');
  });
});

describe('HTML error pages, favicon, navigation', () => {
  test('an unknown dashboard path is an HTML 404 page for a browser, JSON for an API client', async () => {
    const page = await t.app.inject({ url: '/no/such/page?x=1', headers: HTML });
    assert.equal(page.statusCode, 404);
    assert.match(String(page.headers['content-type']), /^text\/html/);
    assert.match(page.body, /<h1>Not found<\/h1>/);
    assert.match(page.body, /<a href="\/">Back to the dashboard<\/a>/);
    assert.equal(page.headers['x-frame-options'], 'DENY');
    assert.equal(page.headers['cache-control'], 'no-store');
    const api = await t.app.inject({ url: '/no/such/page' });
    assert.equal(api.statusCode, 404);
    assert.equal(api.json().error.code, 'NOT_FOUND');
    // The API keeps its envelope whatever the Accept header says.
    const underApi = await t.app.inject({ url: '/public/v1/nope', headers: HTML });
    assert.equal(underApi.json().error.code, 'NOT_FOUND');
  });

  test('a wrong method on a dashboard page is an HTML 405 page with Allow', async () => {
    const res = await t.app.inject({ method: 'DELETE', url: '/campaigns', headers: HTML });
    assert.equal(res.statusCode, 405);
    assert.match(String(res.headers['content-type']), /^text\/html/);
    assert.match(String(res.headers.allow), /GET/);
    assert.match(res.body, /<h1>Error 405<\/h1>/);
  });

  test('an error inside a signed-in page is an HTML page with the navigation', async () => {
    const { session } = await signedIn(t.app, t.database.db);
    const res = await session.get('/campaigns/00000000-0000-4000-8000-000000000000/nothing');
    assert.equal(res.statusCode, 404);
    const missing = await session.get('/contacts/00000000-0000-4000-8000-000000000000');
    assert.equal(missing.statusCode, 404);
    assert.match(missing.body, /<nav aria-label="Main">/);
    assert.match(missing.body, /does not exist/);
  });

  test('favicon: /favicon.ico is an icon, the SVG is an asset, every page links both', async () => {
    const ico = await t.app.inject({ url: '/favicon.ico' });
    assert.equal(ico.statusCode, 200);
    assert.equal(ico.headers['content-type'], 'image/x-icon');
    assert.deepEqual([...ico.rawPayload.subarray(0, 4)], [0, 0, 1, 0], 'an ICO header');
    const svg = await t.app.inject({ url: '/assets/favicon.svg' });
    assert.equal(svg.statusCode, 200);
    assert.match(String(svg.headers['content-type']), /^image\/svg\+xml/);
    const signIn = await t.app.inject({ url: '/sign-in' });
    assert.match(signIn.body, /<link rel="icon" href="\/favicon.ico"/);
    assert.match(signIn.body, /<link rel="icon" href="\/assets\/favicon.svg"/);
  });

  test('the navigation is the NAV list, in order, with the current section marked', async () => {
    const { session } = await signedIn(t.app, t.database.db);
    const page = (await session.get('/settings/team')).body;
    const links = [...page.matchAll(/<li><a href="([^"]+)"( aria-current="page")?>([^<]+)<\/a><\/li>/g)];
    assert.deepEqual(links.map((m) => m[1]), NAV.map((n) => n.href));
    assert.deepEqual(links.filter((m) => m[2]).map((m) => m[3]), ['Team settings']);
  });
});
