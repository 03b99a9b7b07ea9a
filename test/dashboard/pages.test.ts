// The dashboard pages through app.inject: API keys, campaigns, contacts,
// template preview, team isolation (404) and escaping.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { insertMailAccount, insertTemplate } from '../campaigns/fixtures.ts';
import { signedIn } from './session.ts';
import { sql } from 'kysely';
import { addMessageFacts } from '../../src/stats/deltas.ts';
import { foldStats } from '../../src/stats/fold.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
});
after(async () => t?.close());

const ping = (key: string) => t.app.inject({ method: 'GET', url: '/public/v1/ping', headers: { 'x-api-key': key } });

async function makeCampaign(teamId: string, key: string, name = 'Welcome'): Promise<string> {
  const db = t.database.db;
  const res = await t.app.inject({
    method: 'POST',
    url: '/public/v1/email/campaigns',
    headers: { 'x-api-key': key },
    payload: { name, template_ids: [await insertTemplate(db, teamId)], mail_account_ids: [await insertMailAccount(db, teamId)], events: ['contact.saved'] },
  });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().campaign.id;
}

describe('API keys', () => {
  test('create shows the key once; it works; revoke asks first, then the API refuses it at once', async () => {
    const { session } = await signedIn(t.app, t.database.db);
    const created = await session.post('/developer/api-keys', { name: 'CRM <sync>' });
    assert.equal(created.statusCode, 201);
    assert.equal(created.headers['cache-control'], 'no-store');
    const key = created.body.match(/value="(plv_live_[A-Za-z0-9_-]{43})"/)?.[1];
    assert.ok(key, 'key shown');
    assert.match(created.body, /will not be shown again/);
    assert.match(created.body, /CRM &lt;sync&gt;/);
    assert.equal((await ping(key)).statusCode, 200);

    const list = await session.get('/developer/api-keys');
    assert.doesNotMatch(list.body, new RegExp(key), 'never shown again');
    assert.match(list.body, new RegExp(`${key.slice(0, 15)}…`));
    const keyId = list.body.match(/\/developer\/api-keys\/([0-9a-f-]{36})\/revoke/)?.[1];
    assert.ok(keyId);
    const confirm = await session.get(`/developer/api-keys/${keyId}/revoke`);
    assert.match(confirm.body, /Revoke key/);
    const revoked = await session.post(`/developer/api-keys/${keyId}/revoke`);
    assert.equal(revoked.statusCode, 303);
    assert.equal((await ping(key)).statusCode, 401);
  });

  test('an empty name is 422, not a key', async () => {
    const { session } = await signedIn(t.app, t.database.db);
    assert.equal((await session.post('/developer/api-keys', { name: '  ' })).statusCode, 422);
  });
});

describe('campaigns', () => {
  test('list with status and counts; stop and start the latest send', async () => {
    const { session, teamId, key } = await signedIn(t.app, t.database.db);
    const id = await makeCampaign(teamId, key, 'Spring <b>sale</b>');
    const page = await session.get('/campaigns');
    assert.equal(page.statusCode, 200);
    assert.match(page.body, /Spring &lt;b&gt;sale&lt;\/b&gt;/);
    assert.match(page.body, new RegExp(`/campaigns/${id}/stop`));
    assert.equal((await session.post(`/campaigns/${id}/stop`)).headers.location, '/campaigns?done=stopped');
    const stopped = await session.get('/campaigns');
    assert.match(stopped.body, new RegExp(`/campaigns/${id}/start`));
    assert.equal((await session.post(`/campaigns/${id}/stop`)).headers.location, '/campaigns?done=unchanged');
    assert.equal((await session.post(`/campaigns/${id}/start`)).headers.location, '/campaigns?done=started');
  });

  test("counts are the campaign's statistics (people and bots apart), its own only, the same before and after the fold; waiting messages from the log", async () => {
    const db = t.database.db;
    const { session, teamId, key } = await signedIn(t.app, db);
    const id = await makeCampaign(teamId, key, 'Counted');
    const other = await makeCampaign(teamId, key, 'Other');
    const sendOf = async (campaign: string) => (await sql<{ id: string }>`SELECT id FROM campaign_sends WHERE campaign_id = ${campaign}::uuid`.execute(db)).rows[0]!.id;
    // Five messages of the campaign (one still queued), one of the other campaign.
    const { rows: msgs } = await sql<{ id: string }>`
      INSERT INTO email_send_log (team_id, source, campaign_id, campaign_send_id, email, status, sent_at)
      SELECT ${teamId}::uuid, 'campaign', ${id}::uuid, ${await sendOf(id)}::uuid, 'm' || g || '@example.com',
             CASE WHEN g = 5 THEN 'queued' ELSE 'sent' END, CASE WHEN g = 5 THEN NULL ELSE now() END
        FROM generate_series(1, 5) g ORDER BY g RETURNING id`.execute(db);
    const { rows: theirs } = await sql<{ id: string }>`
      INSERT INTO email_send_log (team_id, source, campaign_id, campaign_send_id, email, status, sent_at)
      VALUES (${teamId}::uuid, 'campaign', ${other}::uuid, ${await sendOf(other)}::uuid, 'o@example.com', 'sent', now()) RETURNING id`.execute(db);
    const at = new Date();
    const fact = (i: number, key: 'sent' | 'bounced_hard' | 'opened_human' | 'opened_bot' | 'clicked_human' | 'clicked_bot') => ({ messageId: msgs[i]!.id, key, at });
    await addMessageFacts(db, [
      fact(0, 'sent'), fact(1, 'sent'), fact(2, 'sent'), fact(3, 'sent'), fact(3, 'bounced_hard'),
      fact(0, 'opened_human'), fact(0, 'opened_bot'), fact(1, 'opened_bot'), fact(0, 'clicked_human'), fact(2, 'clicked_bot'),
      { messageId: theirs[0]!.id, key: 'sent', at }, { messageId: theirs[0]!.id, key: 'opened_human', at },
    ]);
    const row = (body: string, name: string) =>
      new RegExp(`>${name}</a>[\\s\\S]*?<td class="num">(\\d+)</td>\\s*<td class="num">(\\d+) · (\\d+)</td>\\s*<td class="num">(\\d+) · (\\d+)</td>\\s*<td class="num">(\\d+)</td>`).exec(body)?.slice(1);
    const check = async () => {
      const list = (await session.get('/campaigns')).body;
      assert.deepEqual(row(list, 'Counted'), ['4', '1', '2', '1', '1', '1'], 'sent 4; opened 1 · 2; clicked 1 · 1; bounced 1');
      assert.deepEqual(row(list, 'Other'), ['1', '1', '0', '0', '0', '0']);
      const page = (await session.get(`/campaigns/${id}`)).body;
      assert.match(page, /id="counts">4 sent · 1 opened by people \(2 by bots\) · 1 clicked by people \(1 by bots\) · 1 bounced · 1 waiting</);
    };
    await check();
    await foldStats(db);
    await check();
  });
});

describe('contacts and template preview', () => {
  test('prefix search, detail with fields and counts, preview for a chosen contact', async () => {
    const { session, teamId, key } = await signedIn(t.app, t.database.db);
    const res = await t.app.inject({
      method: 'POST',
      url: '/public/v1/email/contacts/bulk-upsert',
      headers: { 'x-api-key': key },
      payload: {
        contacts: [
          { email: 'ada@example.com', first_name: '<script>alert(1)</script>', custom_str_1: 'gold' },
          { email: 'ada_b@example.com', first_name: 'Ada B' },
          { email: 'adam@example.com', first_name: 'Adam' },
          { email: 'bob@example.com', first_name: 'Bob' },
        ],
        tags: ['vip'],
      },
    });
    assert.ok(res.statusCode < 300, res.body);
    const search = await session.get('/contacts?q=ADA_');
    assert.match(search.body, /ada_b@example\.com/);
    assert.doesNotMatch(search.body, /adam@example\.com/, '_ is literal, not a wildcard');
    const all = await session.get('/contacts?q=ad');
    assert.match(all.body, /adam@example\.com/);
    assert.doesNotMatch(all.body, /bob@example\.com/);
    assert.doesNotMatch(all.body, /<script>alert/);

    const contactId = all.body.match(/href="\/contacts\/([0-9a-f-]{36})">ada@example\.com/)?.[1];
    assert.ok(contactId);
    const detail = await session.get(`/contacts/${contactId}`);
    assert.equal(detail.statusCode, 200);
    assert.match(detail.body, /custom_str_1/);
    assert.match(detail.body, /gold/);
    assert.match(detail.body, /vip/);
    assert.match(detail.body, /&lt;script&gt;/);

    const templateId = (
      await t.database.db
        .insertInto('templates')
        .values({ team_id: teamId, name: 'Hello', subject: 'Hi {{ contact.first_name }}', content: '<p>Hello {{ contact.first_name }} ({{ contact.custom_str_1 }})</p>' })
        .returning('id')
        .executeTakeFirstOrThrow()
    ).id;
    const preview = await session.get(`/templates/${templateId}?sample_contact=BOB@example.com`);
    assert.equal(preview.statusCode, 200);
    assert.match(preview.body, /Hi Bob/);
    assert.match(preview.body, /srcdoc="&lt;p&gt;Hello Bob \(\)&lt;\/p&gt;"/);
    // As the sender does: a contact's value is text in the HTML, never markup.
    const ada = await session.get(`/templates/${templateId}?sample_contact=ada@example.com`);
    assert.match(ada.body, /srcdoc="&lt;p&gt;Hello &amp;lt;script&amp;gt;alert\(1\)&amp;lt;\/script&amp;gt; \(gold\)&lt;\/p&gt;"/);
    const missing = await session.get(`/templates/${templateId}?sample_contact=nobody@example.com`);
    assert.match(missing.body, /No contact with the e-mail/);
  });
});

describe('team isolation', () => {
  test("another team's campaign, contact, template and key are 404, and their actions change nothing", async () => {
    const a = await signedIn(t.app, t.database.db, 'Team A');
    const b = await signedIn(t.app, t.database.db, 'Team B');
    const campaignId = await makeCampaign(b.teamId, b.key, 'B only');
    const contact = await t.database.db.insertInto('contacts').values({ team_id: b.teamId, email: 'secret@b.example' }).returning('id').executeTakeFirstOrThrow();
    const templateId = await insertTemplate(t.database.db, b.teamId);
    for (const url of [`/contacts/${contact.id}`, `/templates/${templateId}`, `/developer/api-keys/${b.keyId}/revoke`, '/contacts/not-a-uuid', '/templates/../x']) {
      const res = await a.session.get(url);
      assert.equal(res.statusCode, 404, url);
    }
    assert.equal((await a.session.post(`/campaigns/${campaignId}/stop`)).statusCode, 404);
    assert.equal((await a.session.post(`/developer/api-keys/${b.keyId}/revoke`)).statusCode, 404);
    assert.equal((await ping(b.key)).statusCode, 200);
    const lists = await Promise.all(['/campaigns', '/contacts', '/templates', '/developer/api-keys'].map((u) => a.session.get(u)));
    for (const l of lists) {
      assert.equal(l.statusCode, 200);
      assert.doesNotMatch(l.body, /B only|secret@b\.example/);
    }
    const bCampaigns = await b.session.get('/campaigns');
    assert.match(bCampaigns.body, /B only/);
    assert.match(bCampaigns.body, /\/stop"/, 'still active');
  });
});

describe('junk input', () => {
  test('odd queries, bodies and cookies never give a 500', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db);
    const other = await t.database.db.insertInto('campaigns').values({ team_id: teamId, name: 'x', draft_data: '{}', trigger_events: ['contact.saved'] }).returning('id').executeTakeFirstOrThrow();
    const gets = [
      '/contacts?q=%00', '/contacts?q=%FF%FE', '/contacts?q=\u{10FFFF}', '/contacts?q=a&q=b', '/contacts?q[x]=1', `/contacts?after=${'z'.repeat(5000)}`,
      '/contacts?q=%25%5F%5C', '/campaigns?before=not-a-uuid', `/campaigns?before=${other.id}`, '/campaigns?done=__proto__',
      '/templates/00000000-0000-0000-0000-000000000000?sample_contact=%00', '/webhooks/00000000-0000-0000-0000-000000000000?status=x&before=y',
      '/assets/..%2Fplugin.ts', '/assets/__proto__', '/sign-in?next=//evil.example.com', '/developer/api-keys?done=%00',
    ];
    for (const url of gets) {
      const res = await session.get(url);
      assert.ok(res.statusCode < 500, `${url}: ${res.statusCode}`);
    }
    const cookie = [...session.jar].map(([k, v]) => `${k}=${v}`).join('; ');
    const posts: { payload: string; type: string }[] = [
      { payload: '{"name": "json key", "_csrf": 1}', type: 'application/json' },
      { payload: 'name=a&name=b&_csrf=x&_csrf=y', type: 'application/x-www-form-urlencoded' },
      { payload: 'hello', type: 'text/plain' },
      { payload: `name=${'a'.repeat(100_000)}`, type: 'application/x-www-form-urlencoded' },
    ];
    for (const p of posts) {
      const res = await t.app.inject({ method: 'POST', url: '/developer/api-keys', headers: { cookie, 'content-type': p.type }, payload: p.payload });
      assert.ok(res.statusCode < 500 && res.statusCode >= 400, `${p.type}: ${res.statusCode}`);
    }
    const garbage = await t.app.inject({ method: 'GET', url: '/campaigns', headers: { cookie: `plv_session=${'%'.repeat(300)}; plv_pre=%E0%A4%A` } });
    assert.equal(garbage.statusCode, 303);
    const signIn = await session.get('/sign-in?next=//evil.example.com');
    assert.equal(signIn.statusCode, 303, 'already signed in');
  });
});
