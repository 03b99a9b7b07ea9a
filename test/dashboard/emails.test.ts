// The transactional e-mail pages: the list (filters by status and recipient,
// numbered pages, transactional only), one message with the timeline the API
// answers, another team's message as the dashboard's 404, and junk queries.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { insertMailAccount, insertTemplate } from '../campaigns/fixtures.ts';
import { signedIn } from './session.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
});
after(async () => t?.close());

/** A signed-in team with `n` submitted e-mails to r0…r{n-1}@shop.example; their ids in submit order. */
async function teamWithEmails(n: number, name: string) {
  const team = await signedIn(t.app, t.database.db, name);
  const db = t.database.db;
  const [templateId, accountId] = [await insertTemplate(db, team.teamId), await insertMailAccount(db, team.teamId)];
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await t.app.inject({
      method: 'POST', url: '/public/v1/email/emails/submit', headers: { 'x-api-key': team.key },
      payload: { template_id: templateId, mail_account_id: accountId, to_email: `R${i}@Shop.example`, to_name: `Reader ${i}`, subject: `Order ${name} ${i}` },
    });
    assert.equal(res.statusCode, 202, res.body);
    ids.push(res.json().email.id);
  }
  return { ...team, ids };
}

const rowsOn = (body: string) => [...body.matchAll(/href="\/emails\/([0-9a-f-]{36})"/g)].map((m) => m[1]);

describe('transactional e-mail pages', () => {
  test('list: newest first, 20 a page, filters by status and recipient; campaign mail is not listed', async () => {
    const a = await teamWithEmails(23, 'A');
    const db = t.database.db;
    await sql`UPDATE email_send_log SET status = 'sent', sent_at = now() WHERE id = ANY (${a.ids.slice(0, 3)}::uuid[])`.execute(db);
    await sql`UPDATE email_send_log SET source = 'campaign' WHERE id = ${a.ids[22]!}`.execute(db);

    const first = await a.session.get('/emails');
    assert.equal(first.statusCode, 200);
    assert.match(first.body, /<a href="\/emails" aria-current="page">Transactional<\/a>/);
    assert.deepEqual(rowsOn(first.body), a.ids.slice(2, 22).reverse(), 'the newest 20 transactional ones');
    assert.match(first.body, /Page 1 of 2 \(22 e-mails\)/);
    assert.match(first.body, /href="\/emails\?page=2">Next page/);
    const second = await a.session.get('/emails?page=2');
    assert.deepEqual(rowsOn(second.body), a.ids.slice(0, 2).reverse());
    assert.match(second.body, /href="\/emails\?page=1">Previous page/);

    const sent = await a.session.get('/emails?status=sent');
    assert.deepEqual(rowsOn(sent.body), a.ids.slice(0, 3).reverse());
    assert.match(sent.body, /<option value="sent" selected>/);
    const one = await a.session.get('/emails?to_email=%20r7%40SHOP.example');
    assert.deepEqual(rowsOn(one.body), [a.ids[7]]);
    assert.match(one.body, /r7@shop\.example<\/a> \(Reader 7\)/);
    const none = await a.session.get('/emails?status=bounced&to_email=r7%40shop.example');
    assert.deepEqual(rowsOn(none.body), []);
    assert.match(none.body, /No transactional e-mails match these filters/);
    const filteredPager = await a.session.get('/emails?status=queued&page=2');
    assert.deepEqual(rowsOn(filteredPager.body), [], '19 queued: one page');
    assert.match(filteredPager.body, /href="\/emails\?status=queued&amp;page=1">Previous page/, 'pages keep the filters');
  });

  test('past 10,000 messages the pager counts no further: "10,000+", 500 pages, the last page still answers; the API keeps the exact total', async () => {
    const a = await teamWithEmails(1, 'Many');
    const db = t.database.db;
    await sql`
      INSERT INTO email_send_log (team_id, email, status, source, created_at)
      SELECT ${a.teamId}, 'bulk' || g || '@shop.example', 'sent', 'transactional', now() - g * interval '1 second'
        FROM generate_series(1, 10050) g`.execute(db);
    const first = await a.session.get('/emails');
    assert.equal(first.statusCode, 200);
    assert.match(first.body, /Page 1 of 500 \(10,000\+ e-mails\)/);
    const last = await a.session.get('/emails?page=500');
    assert.equal(rowsOn(last.body).length, 20);
    assert.match(last.body, /Page 500 of 500/);
    assert.doesNotMatch(last.body, /Next page/);
    const api = await t.app.inject({ method: 'GET', url: '/public/v1/email/emails?source=transactional&per_page=1', headers: { 'x-api-key': a.key } });
    assert.equal(String(api.json().meta.total), '10051');
  });

  test('one e-mail: the timeline the API answers; another team gets the 404 page and sees none of it', async () => {
    const a = await teamWithEmails(1, 'Timeline A');
    const b = await teamWithEmails(1, 'Timeline B');
    const id = a.ids[0]!;
    await sql`
      UPDATE email_send_log SET status = 'bounced_hard', attempts = 1, sent_at = now(), bounced_at = now(),
             smtp_response = '250 queued as X1', last_error = '550 <r0@shop.example>: mailbox unknown', message_id = 'm1@example.com'
       WHERE id = ${id}`.execute(t.database.db);
    const api = await t.app.inject({ method: 'GET', url: `/public/v1/email/emails/${id}`, headers: { 'x-api-key': a.key } });
    const events = api.json().email.events as { type: string; detail: Record<string, unknown> }[];
    assert.deepEqual(events.map((e) => e.type), ['queued', 'sent', 'bounced']);

    const page = await a.session.get(`/emails/${id}`);
    assert.equal(page.statusCode, 200);
    const cells = [...page.body.matchAll(/<tr><td>[^<]*<\/td><td>([a-z]+)<\/td>/g)].map((m) => m[1]);
    assert.deepEqual(cells, events.map((e) => e.type), 'the same events, in the same order');
    assert.match(page.body, /<code>bounce_type<\/code>: hard/);
    assert.match(page.body, /550 &lt;r0@shop\.example&gt;: mailbox unknown/, 'SMTP text is escaped');
    assert.match(page.body, /status-bounced">bounced</);

    for (const url of [`/emails/${b.ids[0]}`, '/emails/not-a-uuid', '/emails/00000000-0000-0000-0000-000000000000']) {
      const res = await a.session.get(url);
      assert.equal(res.statusCode, 404, url);
      assert.doesNotMatch(res.body, /r0@shop\.example/);
    }
    const bList = await b.session.get('/emails?per_page=100');
    assert.deepEqual(rowsOn(bList.body), [b.ids[0]], "B's list holds B's e-mail only");
    assert.ok(!bList.body.includes(id));
  });

  test('junk queries never give a 500, and ask nothing of another team', async () => {
    const a = await teamWithEmails(1, 'Junk');
    for (const q of ['page=abc', 'page=-3', 'page=0', 'page=99999999999', 'page=1e3', 'status=__proto__', 'status=sent&status=queued',
      'to_email=%00', `to_email=${'x'.repeat(5000)}`, 'to_email[x]=1', 'status=%FF%FE']) {
      const res = await a.session.get(`/emails?${q}`);
      assert.ok(res.statusCode < 500, `${q}: ${res.statusCode}`);
    }
    assert.deepEqual(rowsOn((await a.session.get('/emails?page=abc')).body), a.ids);
    assert.equal((await t.app.inject({ method: 'GET', url: '/emails' })).statusCode, 303, 'signed out: to the sign-in page');
  });
});
