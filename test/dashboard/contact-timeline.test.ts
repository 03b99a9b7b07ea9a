// The contact timeline page through app.inject: linked from the contact page,
// each item in words (a skipped decision's reason as the campaign page words
// it, an open's bot verdict with its signals), paged both ways, a broken page
// link a 400 page, another team's contact 404.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { seedContactHistory } from '../contacts/timeline-fixtures.ts';
import { TIMELINE_PER_PAGE } from '../../src/dashboard/contact-pages.ts';
import { signedIn } from './session.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
});
after(async () => t?.close());

test('contact timeline page: reasons in words, bot verdict, pages, errors, isolation', async () => {
  const me = await signedIn(t.app, t.database.db, 'Timeline team');
  const s = await seedContactHistory(t.app, t.database.db, me.teamId, me.key);

  const contact = await me.session.get(`/contacts/${s.contactId}`);
  assert.equal(contact.statusCode, 200);
  assert.match(contact.body, new RegExp(`href="/contacts/${s.contactId}/timeline"`));

  // Oldest first puts the seeded history on the first page.
  const page = await me.session.get(`/contacts/${s.contactId}/timeline?order=asc`);
  assert.equal(page.statusCode, 200, page.body.slice(0, 500));
  assert.match(page.body, /Not sent by campaign “Welcome series”: the contact got this campaign within the cooldown/);
  assert.match(page.body, /Sent by campaign “Welcome series” on contact\.saved/);
  assert.match(page.body, /Opened by a bot \(apple_mpp_proxy, prefetch_timing\) <span class="status verdict verdict-bot">bot<\/span>/);
  assert.match(page.body, /Clicked https:\/\/example\.com\/offer by a person <span class="status verdict verdict-person">person<\/span>/);
  assert.match(page.body, new RegExp(`<a href="/emails/${s.messages.sent}">message</a>`));
  const rows = (body: string) => [...body.matchAll(/<tr class="item-([a-z_]+)">/g)].map((m) => m[1]);
  const first = rows(page.body);
  assert.equal(first.length, TIMELINE_PER_PAGE);
  assert.equal(first[0], 'contact_saved');

  // The next page continues where the first stopped, and the two together are the API's oldest-first list.
  const next = page.body.match(/href="(\/contacts\/[^"]+\/timeline\?order=asc&amp;after=[^"]+)">Next page/)?.[1];
  assert.ok(next, 'a next page link');
  const second = await me.session.get(next.replaceAll('&amp;', '&'));
  assert.equal(second.statusCode, 200);
  const api = await t.app.inject({ method: 'GET', url: `/public/v1/email/contacts/${s.contactId}/timeline?order=asc&per_page=100`, headers: { 'x-api-key': me.key } });
  const types = (api.json().timeline as { type: string }[]).map((i) => i.type);
  assert.deepEqual([...first, ...rows(second.body)], types.slice(0, first.length + rows(second.body).length));
  assert.ok(types.length <= 2 * TIMELINE_PER_PAGE && !/Next page/.test(second.body), 'two pages hold it all');

  // Newest first by default: the API's newest item leads.
  const newest = await me.session.get(`/contacts/${s.contactId}/timeline`);
  assert.equal(rows(newest.body)[0], types[types.length - 1]);

  assert.equal((await me.session.get(`/contacts/${s.contactId}/timeline?after=garbage`)).statusCode, 400);
  const other = await signedIn(t.app, t.database.db, 'Other team');
  assert.equal((await other.session.get(`/contacts/${s.contactId}/timeline`)).statusCode, 404);
  assert.equal((await other.session.get('/contacts/not-a-uuid/timeline')).statusCode, 404);
});
