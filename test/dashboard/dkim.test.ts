// The dashboard's DKIM page of a mail account (generate, the record to publish,
// activate after DNS, delete, check DNS; another team's account is the 404
// page) and the message page's timeline (verdicts of opens and clicks, bounce
// diagnostics, a kind the page does not know shown with its detail).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { describeEvent } from '../../src/dashboard/email-timeline-view.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { insertMailAccount, insertTemplate } from '../campaigns/fixtures.ts';
import { signedIn } from './session.ts';

const zone = new Map<string, string[][]>();
const resolveTxt = async (name: string): Promise<string[][]> => {
  const found = zone.get(name.toLowerCase());
  if (!found) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
  return found;
};

let t: TestApp;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 }, deps: { resolveTxt } });
});
after(async () => t?.close());

const keyRows = (body: string) => [...body.matchAll(/<tr data-key="([0-9a-f-]{36})">/g)].map((m) => m[1]!);
const decode = (s: string) => s.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

describe('DKIM page of a mail account', () => {
  test('generate, publish what the page says, activate, check DNS, delete; forms need the CSRF token', async () => {
    const a = await signedIn(t.app, t.database.db, 'DKIM A');
    const accountId = await insertMailAccount(t.database.db, a.teamId);
    const url = `/mail-accounts/${accountId}/dkim`;
    const empty = await a.session.get(url);
    assert.equal(empty.statusCode, 200);
    assert.match(empty.body, /DKIM for example\.com/);
    assert.match(empty.body, /id="no-keys"/);

    assert.equal((await a.session.post(url, { algorithm: 'rsa', _csrf: null })).statusCode, 403, 'no CSRF token: refused');
    assert.equal((await a.session.post(url, { algorithm: 'dsa' })).statusCode, 422);
    const bad = await a.session.post(url, { algorithm: 'rsa', selector: 'not_valid' });
    assert.equal(bad.statusCode, 422);
    assert.match(bad.body, /Selector must be DNS labels/);
    assert.match(bad.body, /value="not_valid"/, 'the form keeps what was typed');

    const made = await a.session.post(url, { algorithm: 'rsa', selector: 'dash' });
    assert.equal(made.statusCode, 303, made.body);
    assert.equal(made.headers.location, `${url}?done=created`);
    const page = await a.session.get(`${url}?done=created`);
    assert.match(page.body, /Key generated\. Publish its DNS record/);
    const [keyId] = keyRows(page.body);
    assert.ok(keyId);
    const name = decode(/id="name-[^"]+" type="text" readonly value="([^"]+)"/.exec(page.body)![1]!);
    const value = decode(/id="value-[^"]+" type="text" readonly value="([^"]+)"/.exec(page.body)![1]!);
    assert.equal(name, 'dash._domainkey.example.com');
    assert.match(value, /^v=DKIM1; k=rsa; p=[A-Za-z0-9+/]+=*$/);
    assert.match(page.body, /status-queued">pending</);

    const early = await a.session.post(`${url}/${keyId}/activate`);
    assert.equal(early.statusCode, 409);
    assert.match(early.body, /not published yet/);

    // Publish exactly what the page showed; the same key as the API's.
    zone.set(name, [[value.slice(0, 255), value.slice(255)]]);
    const api = await t.app.inject({ method: 'GET', url: `/public/v1/email/mail-accounts/${accountId}/dkim`, headers: { 'x-api-key': a.key } });
    assert.equal(api.json().dkim_keys[0].dns_record.value, value);
    const activated = await a.session.post(`${url}/${keyId}/activate`);
    assert.equal(activated.statusCode, 303, activated.body);
    const active = await a.session.get(`${url}?done=activated`);
    assert.match(active.body, /Key activated/);
    assert.match(active.body, /status-active">active</);

    const check = await a.session.get(`/mail-accounts/${accountId}/dns-check`);
    assert.equal(check.statusCode, 200);
    assert.match(check.body, /<tr data-check="spf">.*status-failed">missing</s);
    assert.match(check.body, /<tr data-check="dkim-dash">.*status-active">found</s);
    assert.match(check.body, /<tr data-check="dmarc">.*missing/s);

    // A second key, forced; then deleted.
    await a.session.post(url, { algorithm: 'ed25519', selector: 'ed' });
    const both = await a.session.get(url);
    const edId = keyRows(both.body).find((id) => id !== keyId)!;
    assert.equal((await a.session.post(`${url}/${edId}/activate`, { force: 'on' })).statusCode, 303);
    assert.equal((await a.session.post(`${url}/${edId}/delete`)).statusCode, 303);
    assert.deepEqual(keyRows((await a.session.get(url)).body), [keyId]);
    assert.equal((await a.session.post(`${url}/${edId}/delete`)).statusCode, 404);

    // Another team: the 404 page for the account, its keys and its DNS check.
    const b = await signedIn(t.app, t.database.db, 'DKIM B');
    for (const path of [url, `/mail-accounts/${accountId}/dns-check`, '/mail-accounts/not-a-uuid/dkim']) {
      const res = await b.session.get(path);
      assert.equal(res.statusCode, 404, path);
      assert.doesNotMatch(res.body, /dash\._domainkey/);
    }
    assert.equal((await b.session.post(`${url}/${keyId}/delete`)).statusCode, 404);
    assert.equal((await b.session.post(`${url}/${keyId}/activate`, { force: 'on' })).statusCode, 404);
    assert.equal((await b.session.post(url, { algorithm: 'rsa' })).statusCode, 404);
    assert.deepEqual(keyRows((await a.session.get(url)).body), [keyId], 'untouched');
    assert.equal((await t.app.inject({ method: 'GET', url })).statusCode, 303, 'signed out: to the sign-in page');
  });
});

describe('message page timeline', () => {
  test('sent, bounced with the diagnostic, opens and clicks with the person-or-bot verdict, in order', async () => {
    const a = await signedIn(t.app, t.database.db, 'Timeline');
    const db = t.database.db;
    const [templateId, accountId] = [await insertTemplate(db, a.teamId), await insertMailAccount(db, a.teamId)];
    const res = await t.app.inject({
      method: 'POST', url: '/public/v1/email/emails/submit', headers: { 'x-api-key': a.key },
      payload: { template_id: templateId, mail_account_id: accountId, to_email: 'reader@shop.example' },
    });
    const id = res.json().email.id as string;
    await sql`
      UPDATE email_send_log SET status = 'bounced_soft', attempts = 2, created_at = now() - interval '2 hours', sent_at = now() - interval '1 hour',
             bounced_at = now(), smtp_response = '250 ok', last_error = '452 4.2.2 <reader@shop.example>: mailbox full'
       WHERE id = ${id}`.execute(db);
    await sql`
      INSERT INTO tracking_hits (team_id, email_send_log_id, kind, method, url, is_bot, bot_score, reasons, created_at) VALUES
        (${a.teamId}, ${id}, 'open', 'GET', NULL, true, 0.9, '{image_proxy}', now() - interval '50 minutes'),
        (${a.teamId}, ${id}, 'open', 'GET', NULL, false, 0.1, '{}', now() - interval '40 minutes'),
        (${a.teamId}, ${id}, 'click', 'GET', 'https://example.com/offer', false, 0.1, '{}', now() - interval '30 minutes')`.execute(db);

    const page = await a.session.get(`/emails/${id}`);
    assert.equal(page.statusCode, 200);
    const rows = [...page.body.matchAll(/<tr><td>[^<]*<\/td><td>([a-z.]+)<\/td><td class="event event-([a-z]+)">(.*?)<\/td>/g)]
      .map((m) => [m[1], m[2], m[3]!.replace(/<[^>]+>/g, '').trim()]);
    assert.deepEqual(rows, [
      ['queued', 'neutral', 'Queued (transactional)'],
      ['sent', 'good', 'Accepted by the SMTP server'],
      ['opened', 'good', 'Opened by a bot (image_proxy) bot'],
      ['opened', 'good', 'Opened by a person person'],
      ['clicked', 'good', 'Clicked https://example.com/offer (a person) person'],
      ['bounced', 'bad', 'Soft bounce: 452 4.2.2 &lt;reader@shop.example&gt;: mailbox full'],
    ]);
    assert.match(page.body, /verdict-bot">bot</);
    assert.match(page.body, /<code>bounce_type<\/code>: soft/);
  });

  test('a kind the page does not know is shown by name with its whole detail; known ones get a sentence', () => {
    const unknown = describeEvent({ type: 'email.bounced.dsn', at: '2026-01-01T00:00:00.000Z', detail: { status: '5.1.1', remote_mta: 'mx.example', n: 2 } });
    assert.equal(unknown.summary, 'Email bounced dsn');
    assert.equal(unknown.tone, 'neutral');
    assert.deepEqual(unknown.detail, [{ key: 'status', value: '5.1.1' }, { key: 'remote_mta', value: 'mx.example' }, { key: 'n', value: '2' }]);
    assert.equal(describeEvent({ type: 'complained', at: '', detail: { feedback_type: 'abuse' } }).summary, 'The recipient reported it as spam');
    assert.equal(describeEvent({ type: 'replied', at: '', detail: {} }).summary, 'The recipient replied');
    assert.equal(describeEvent({ type: 'bounced', at: '', detail: { bounce_type: 'hard', diagnostic: '5.1.1 user unknown' } }).summary, 'Hard bounce: 5.1.1 user unknown');
    assert.equal(describeEvent({ type: 'clicked', at: '', detail: { is_bot: true, reasons: ['scanner'] } }).verdict, 'bot');
    assert.equal(describeEvent({ type: 'toString', at: '', detail: {} }).summary, 'ToString', 'no prototype keys taken for kinds');
  });
});
