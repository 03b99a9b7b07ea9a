// Dashboard management actions: a mail account's IMAP mailbox in its form and
// list, its DKIM link, delete of mail accounts and campaigns (confirm step,
// CSRF, the 409 of a mail account a campaign uses shown on the page), and
// erasing a contact (confirm naming what goes). Each refuses another team's
// resource with 404 and a POST without the CSRF token with 403.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { emailHmac } from '../../src/contacts/suppressions.ts';
import { imapPasswordBox } from '../../src/inbound/imap/settings.ts';
import { api, createCampaign, createTemplate } from '../engine/fixtures.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { signedIn } from './session.ts';

const config = testConfig({ signInRateLimitPerMinute: 1000 });
let t: TestApp;
before(async () => {
  t = await buildTestApp({ config });
});
after(async () => {
  await t?.close();
});

async function mailAccount(key: string, from = 'news@example.com'): Promise<string> {
  const res = await t.app.inject({
    method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key },
    payload: { host: '127.0.0.1', port: 2525, security: 'none', from_email: from },
  });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().mail_account.id;
}
const imapRow = async (id: string) =>
  (await t.database.pool.query('SELECT host, port, username, folder, password_enc FROM mail_account_imap WHERE mail_account_id = $1', [id])).rows[0] as
    | { host: string; port: number; username: string; folder: string; password_enc: Buffer }
    | undefined;

const SMTP_FORM = { host: '127.0.0.1', port: '2525', security: 'none', from_email: 'bounces@example.com', daily_limit: '500', campaign_share_percent: '90' };

describe('mail accounts: IMAP mailbox and DKIM link', () => {
  test('create and edit set, keep and remove the IMAP mailbox with the API’s checks; the list shows it and links to DKIM', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db);
    await session.get('/mail-accounts/new');
    // A public IMAP host only on 143 or 993: the API's refusal, named imap.port, nothing saved.
    const refused = await session.post('/mail-accounts', { ...SMTP_FORM, imap_host: '93.184.215.14', imap_port: '2525', imap_user: 'b', imap_password: 'p' });
    assert.equal(refused.statusCode, 422, refused.body);
    assert.match(refused.body, /<code>imap\.port<\/code>/);
    assert.match(refused.body, /value="93\.184\.215\.14"/, 'the form keeps what was typed');
    assert.equal((await t.database.pool.query('SELECT count(*)::int AS n FROM mail_accounts WHERE team_id = $1', [teamId])).rows[0].n, 0);

    const created = await session.post('/mail-accounts', {
      ...SMTP_FORM, imap_host: '127.0.0.1', imap_port: '1143', imap_security: 'none', imap_user: 'bounce-box', imap_password: 'imap-pass', imap_folder: 'Bounces',
    });
    assert.equal(created.statusCode, 303, created.body);
    const { rows: [acc] } = await t.database.pool.query('SELECT id FROM mail_accounts WHERE team_id = $1', [teamId]);
    const id = acc.id as string;
    let row = await imapRow(id);
    assert.deepEqual([row?.host, row?.port, row?.username, row?.folder], ['127.0.0.1', 1143, 'bounce-box', 'Bounces']);
    assert.equal(imapPasswordBox(config.appSecret!).open(row!.password_enc), 'imap-pass');

    const list = await session.get('/mail-accounts');
    assert.match(list.body, /<code>127\.0\.0\.1:1143<\/code><br><small>bounce-box · Bounces/);
    assert.ok(list.body.includes(`href="/mail-accounts/${id}/dkim"`), 'links to the DKIM page');
    assert.ok(list.body.includes(`href="/mail-accounts/${id}/delete"`));
    assert.equal((await session.get(`/mail-accounts/${id}/dkim`)).statusCode, 200);

    const edit = await session.get(`/mail-accounts/${id}/edit`);
    assert.match(edit.body, /id="imap_user" name="imap_user" maxlength="320" value="bounce-box"/);
    assert.doesNotMatch(edit.body, /imap-pass/, 'the password is never shown');
    // An empty IMAP password keeps the saved one.
    const saved = await session.post(`/mail-accounts/${id}/edit`, { ...SMTP_FORM, imap_host: '127.0.0.1', imap_port: '1144', imap_security: 'none', imap_user: 'other', imap_password: '', imap_folder: 'INBOX' });
    assert.equal(saved.statusCode, 303, saved.body);
    row = await imapRow(id);
    assert.deepEqual([row?.port, row?.username], [1144, 'other']);
    assert.equal(imapPasswordBox(config.appSecret!).open(row!.password_enc), 'imap-pass');
    // An emptied IMAP server removes the mailbox.
    assert.equal((await session.post(`/mail-accounts/${id}/edit`, { ...SMTP_FORM, imap_host: '', imap_port: '993' })).statusCode, 303);
    assert.equal(await imapRow(id), undefined);
  });
});

describe('mail accounts: delete', () => {
  test('confirm step; CSRF; 409 shown while a campaign uses it; other team 404; then deleted', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    const a = api(t, key);
    const id = await mailAccount(key);
    const campaign = await createCampaign(a, { name: 'Spring news', template_ids: [await createTemplate(a)], mail_account_ids: [id] });

    const confirm = await session.get(`/mail-accounts/${id}/delete`);
    assert.equal(confirm.statusCode, 200);
    assert.match(confirm.body, /Delete the mail account news@example\.com\?/);
    assert.match(confirm.body, /messages queued for it and not yet being sent are cancelled/);

    assert.equal((await session.post(`/mail-accounts/${id}/delete`, { _csrf: null })).statusCode, 403);
    assert.equal((await session.post(`/mail-accounts/${id}/delete`, { _csrf: 'forged' })).statusCode, 403);

    const refused = await session.post(`/mail-accounts/${id}/delete`);
    assert.equal(refused.statusCode, 409, refused.body);
    assert.match(refused.body, /role="alert">the mail account is used by a campaign: &#34;Spring news&#34;; remove it from them or delete them first</);

    const other = await signedIn(t.app, t.database.db);
    assert.equal((await other.session.get(`/mail-accounts/${id}/delete`)).statusCode, 404);
    assert.equal((await other.session.post(`/mail-accounts/${id}/delete`)).statusCode, 404);
    assert.equal((await session.get('/mail-accounts/not-a-uuid/delete')).statusCode, 404);

    await session.get(`/campaigns/${campaign.id}`);
    assert.equal((await session.post(`/campaigns/${campaign.id}/delete`)).statusCode, 303);
    const done = await session.post(`/mail-accounts/${id}/delete`);
    assert.equal(done.statusCode, 303, done.body);
    assert.equal(done.headers.location, '/mail-accounts?done=deleted');
    assert.match((await session.get('/mail-accounts?done=deleted')).body, /Mail account deleted/);
    assert.equal((await session.get(`/mail-accounts/${id}/edit`)).statusCode, 404);
    const left = await t.database.pool.query('SELECT count(*)::int AS n FROM mail_accounts WHERE team_id = $1 AND deleted_at IS NULL', [teamId]);
    assert.equal(left.rows[0].n, 0);
  });
});

describe('campaigns: delete', () => {
  test('the campaign page links to a confirm step; CSRF; other team 404; then gone', async () => {
    const { session, key } = await signedIn(t.app, t.database.db);
    const a = api(t, key);
    const c = await createCampaign(a, { name: 'Autumn', template_ids: [await createTemplate(a)], mail_account_ids: [await mailAccount(key)] });
    const page = await session.get(`/campaigns/${c.id}`);
    assert.ok(page.body.includes(`href="/campaigns/${c.id}/delete"`));
    const confirm = await session.get(`/campaigns/${c.id}/delete`);
    assert.equal(confirm.statusCode, 200);
    assert.match(confirm.body, /Delete the campaign “Autumn”\?/);

    assert.equal((await session.post(`/campaigns/${c.id}/delete`, { _csrf: null })).statusCode, 403);
    const other = await signedIn(t.app, t.database.db);
    assert.equal((await other.session.get(`/campaigns/${c.id}/delete`)).statusCode, 404);
    assert.equal((await other.session.post(`/campaigns/${c.id}/delete`)).statusCode, 404);
    assert.equal((await a.get(`/email/campaigns/${c.id}`)).statusCode, 200, 'still there');

    const done = await session.post(`/campaigns/${c.id}/delete`);
    assert.equal(done.statusCode, 303);
    assert.equal(done.headers.location, '/campaigns?done=deleted');
    assert.equal((await a.get(`/email/campaigns/${c.id}`)).statusCode, 404);
    assert.equal((await session.get(`/campaigns/${c.id}`)).statusCode, 404);
    assert.equal((await session.post(`/campaigns/${c.id}/delete`)).statusCode, 404, 'a second delete');
  });
});

describe('contacts: erase', () => {
  test('confirm names what goes; CSRF; other team 404; then no table holds the address in clear', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    const a = api(t, key);
    const res = await a.post('/email/contacts/upsert', { email: 'grace@example.com', first_name: 'Grace' });
    assert.ok(res.statusCode < 300, res.body);
    await a.post('/email/events', { event_name: 'lead.created', email: 'grace@example.com' });
    const { rows: [contact] } = await t.database.pool.query('SELECT id FROM contacts WHERE team_id = $1 AND email = $2', [teamId, 'grace@example.com']);
    const id = contact.id as string;

    const page = await session.get(`/contacts/${id}`);
    assert.ok(page.body.includes(`href="/contacts/${id}/erase"`));
    const confirm = await session.get(`/contacts/${id}/erase`);
    assert.equal(confirm.statusCode, 200);
    assert.match(confirm.body, /Erase grace@example\.com\?/);
    assert.match(confirm.body, /the contact grace@example\.com: its fields, tags and counters/);
    assert.match(confirm.body, /0 messages to the address/);
    assert.match(confirm.body, /[1-9]\d* events? about the contact/);

    assert.equal((await session.post(`/contacts/${id}/erase`, { _csrf: null })).statusCode, 403);
    const other = await signedIn(t.app, t.database.db);
    assert.equal((await other.session.get(`/contacts/${id}/erase`)).statusCode, 404);
    assert.equal((await other.session.post(`/contacts/${id}/erase`)).statusCode, 404);
    assert.equal((await session.get('/contacts/0000/erase')).statusCode, 404);
    assert.equal((await t.database.pool.query('SELECT count(*)::int AS n FROM contacts WHERE id = $1', [id])).rows[0].n, 1, 'not erased yet');

    const done = await session.post(`/contacts/${id}/erase`);
    assert.equal(done.statusCode, 303, done.body);
    assert.equal(done.headers.location, '/contacts?done=erased');
    assert.match((await session.get('/contacts?done=erased')).body, /Contact erased/);
    assert.equal((await t.database.pool.query('SELECT count(*)::int AS n FROM contacts WHERE team_id = $1', [teamId])).rows[0].n, 0);
    assert.equal((await t.database.pool.query("SELECT count(*)::int AS n FROM events WHERE team_id = $1 AND payload::text LIKE '%grace@%'", [teamId])).rows[0].n, 0);
    const hashed = await t.database.pool.query('SELECT reason FROM suppressions WHERE team_id = $1 AND email_hmac = $2', [teamId, emailHmac(config.appSecret!, 'grace@example.com')]);
    assert.equal(hashed.rows[0]?.reason, 'erased');
    assert.equal((await session.get(`/contacts/${id}`)).statusCode, 404);
  });
});
