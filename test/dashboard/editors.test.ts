// The dashboard's create and edit pages through app.inject: templates (editor,
// live preview with sample data, the template body limit), mail accounts
// (create with the SMTP check against a sink on 127.0.0.1, check, disable,
// enable), campaigns (create, edit, the page with its sends and decisions).
// Every form's refusals are compared with what the API answers for the same
// input: the same field names and messages.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { insertMailAccount, insertTemplate } from '../campaigns/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { signedIn } from './session.ts';

let t: TestApp;
let sink: CaptureSink;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
  sink = await startCaptureSink();
});
after(async () => {
  await sink?.close();
  await t?.close();
});

const escape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&#34;').replace(/'/g, '&#39;');

type Detail = { field: string; message: string };
async function apiDetails(key: string, url: string, payload: object, method: 'POST' | 'PATCH' = 'POST'): Promise<Detail[]> {
  const res = await t.app.inject({ method, url: `/public/v1/email/${url}`, headers: { 'x-api-key': key }, payload });
  assert.equal(res.statusCode, 422, res.body);
  return res.json().error.details;
}

/** The page lists exactly the API's details (field and message), in order. */
function assertSameDetails(page: string, details: Detail[]) {
  assert.ok(details.length > 0);
  const shown = [...page.matchAll(/<li>(?:<code>([^<]*)<\/code> )?([^<]*)<\/li>/g)].map((m) => ({ field: m[1] ?? '', message: m[2] }));
  assert.deepEqual(shown, details.map((d) => ({ field: escape(d.field), message: escape(d.message) })));
}

async function addContacts(key: string, contacts: object[]) {
  const res = await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': key }, payload: { contacts } });
  assert.ok(res.statusCode < 300, res.body);
}

describe('templates', () => {
  test('create: the API’s refusals with its messages, then saved; its page previews it', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    assert.equal((await session.get('/templates/new')).statusCode, 200);

    const bad = { name: '  ', subject: 'Hi\r\nthere', content: '<p>{% if x %}unclosed</p>' };
    const refused = await session.post('/templates', bad);
    assert.equal(refused.statusCode, 422);
    assertSameDetails(refused.body, await apiDetails(key, 'templates', { ...bad, content_type: 'html' }));
    assert.match(refused.body, /unclosed&lt;\/p&gt;<\/textarea>/, 'the content is kept in the form');
    const none = await t.database.db.selectFrom('templates').select('id').where('team_id', '=', teamId).execute();
    assert.equal(none.length, 0, 'nothing written');

    const created = await session.post('/templates', { name: 'Welcome', subject: 'Hi {{ contact.first_name }}', content: '<p>Hello {{ contact.first_name }}</p>', alt_content: '' });
    assert.equal(created.statusCode, 303, created.body);
    const id = String(created.headers.location).match(/^\/templates\/([0-9a-f-]{36})\?done=created$/)?.[1];
    assert.ok(id);
    const row = await t.database.db.selectFrom('templates').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(row.team_id, teamId);
    const viaApi = await t.app.inject({
      method: 'POST', url: '/public/v1/email/templates', headers: { 'x-api-key': key },
      payload: { name: 'Welcome', subject: 'Hi {{ contact.first_name }}', content: '<p>Hello {{ contact.first_name }}</p>', content_type: 'html' },
    });
    assert.equal(row.alt_content, viaApi.json().template.alt_content, 'derived from the HTML as the API derives it');
    assert.equal(row.alt_content, 'Hello {{ contact.first_name }}');
    assert.equal(row.subject, 'Hi {{ contact.first_name }}');
    const page = await session.get(String(created.headers.location));
    assert.match(page.body, /Template created\./);
    assert.match(page.body, /<p class="subject">Hi Sam<\/p>/, 'previewed for the sample contact (the team has none)');
  });

  test('preview: sample contact (never an unsubscribed one), event and campaign data the user can change', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    const content = '<p>{{ contact.first_name | default: "there" }} · {{ event.name }} · {{ event.payload.amount }} · {{ campaign.name }}</p>';
    // No contact yet: a made-up sample contact.
    const alone = await session.post('/templates/preview', { name: 'P', subject: 'S', content });
    assert.equal(alone.statusCode, 200);
    assert.match(alone.body, /made-up sample contact/);
    assert.match(alone.body, /Sam · contact\.saved · 49\.9 · Sample campaign/);

    // "aaa" sorts first but is unsubscribed: the default is the first active contact.
    await addContacts(key, [{ email: 'aaa@example.com', first_name: 'Unsub' }, { email: 'bbb@example.com', first_name: 'Bea' }]);
    await t.database.db.updateTable('contacts').set({ status: 'unsubscribed' }).where('team_id', '=', teamId).where('email', '=', 'aaa@example.com').execute();
    const preview = await session.post('/templates/preview', {
      name: 'P', subject: 'Order {{ event.payload.order }}', content,
      sample_event: 'sale.created', sample_payload: '{"amount": 12.5, "order": "A-1"}', sample_campaign: 'Spring <sale>',
    });
    assert.equal(preview.statusCode, 200);
    assert.doesNotMatch(preview.body, /Unsub/);
    assert.match(preview.body, /bbb@example\.com/);
    assert.match(preview.body, /Order A-1/);
    // Values in the HTML are escaped like the sender does, then escaped again into srcdoc.
    assert.match(preview.body, /Bea · sale\.created · 12\.5 · Spring &amp;lt;sale&amp;gt;/);
    // A chosen contact, even an unsubscribed one, is shown with a note.
    const chosen = await session.post('/templates/preview', { name: 'P', content, sample_contact: 'AAA@example.com' });
    assert.match(chosen.body, /Unsub · /);
    assert.match(chosen.body, /campaigns send nothing to this contact/);

    const badJson = await session.post('/templates/preview', { name: 'P', content, sample_payload: '{"amount": ' });
    assert.match(badJson.body, /not valid JSON/);
    const notObject = await session.post('/templates/preview', { name: 'P', content, sample_payload: '[1]' });
    assert.match(notObject.body, /must be a JSON object/);
    const unknown = await session.post('/templates/preview', { name: 'P', content, sample_contact: 'nobody@example.com' });
    assert.match(unknown.body, /No contact with the e-mail/);
    const broken = await session.post('/templates/preview', { name: 'P', content: '{% for %}' });
    assert.equal(broken.statusCode, 200);
    assert.match(broken.body, /Could not render the template with this data: content: /);
    // A saved template's page takes the same sample data in its query string.
    const id = await insertTemplate(t.database.db, teamId);
    const page = await session.get(`/templates/${id}?sample_contact=bbb@example.com`);
    assert.match(page.body, /Hi Bea/);
  });

  test('the editor and its preview take the template body limit (2 MiB), not the 64 KiB of other forms', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db);
    const content = `<p>${'x'.repeat(900 * 1024)}</p>`;
    const preview = await session.post('/templates/preview', { name: 'Big', content });
    assert.equal(preview.statusCode, 200);
    const created = await session.post('/templates', { name: 'Big', content });
    assert.equal(created.statusCode, 303);
    const rows = await t.database.db.selectFrom('templates').select('id').where('team_id', '=', teamId).where('name', '=', 'Big').execute();
    assert.equal(rows.length, 1);
    const tooBig = await session.post('/templates', { name: 'Huge', content: 'y'.repeat(2 * 1024 * 1024 + 10) });
    assert.equal(tooBig.statusCode, 413);
    // Other dashboard forms keep their 64 KiB.
    assert.equal((await session.post('/mail-accounts', { host: 'x'.repeat(70 * 1024) })).statusCode, 413);
  });

  test('edit: the same checks, a new version campaigns pick up; another team’s template is 404', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    const id = await insertTemplate(t.database.db, teamId);
    const before_ = await t.database.db.selectFrom('templates').select('updated_at').where('id', '=', id).executeTakeFirstOrThrow();
    const form = await session.get(`/templates/${id}/edit`);
    assert.equal(form.statusCode, 200);
    assert.match(form.body, /Hi \{\{ contact\.first_name \}\}/);
    // The API's PATCH of the same fields answers the same details.
    const tooLong = { name: 'x'.repeat(300), content: '<p>x</p>' };
    const refused = await session.post(`/templates/${id}/edit`, tooLong);
    assert.equal(refused.statusCode, 422);
    assertSameDetails(refused.body, await apiDetails(key, `templates/${id}`, { ...tooLong, subject: null }, 'PATCH'));
    const badLiquid = { name: ' ', content: '{{ "a" | append: }}', subject: 'a {% if %}' };
    const refused2 = await session.post(`/templates/${id}/edit`, badLiquid);
    assert.equal(refused2.statusCode, 422);
    assertSameDetails(refused2.body, await apiDetails(key, `templates/${id}`, badLiquid, 'PATCH'));
    const saved = await session.post(`/templates/${id}/edit`, { name: 'Renamed', subject: 'New', content: '<p>New {{ contact.email }}</p>' });
    assert.equal(saved.statusCode, 303);
    const row = await t.database.db.selectFrom('templates').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(row.name, 'Renamed');
    assert.equal(row.content, '<p>New {{ contact.email }}</p>');
    assert.ok(row.updated_at > before_.updated_at, 'a new version key for the render cache');
    assert.equal(row.version, 2, 'one new version (the refused edits made none)');
    assert.match((await session.get(`/templates/${id}?done=saved`)).body, /Template saved[\s\S]*Version 2, updated/);
    assert.equal(row.alt_content, 'New {{ contact.email }}', 'the text part derived again from the new HTML');

    const other = await signedIn(t.app, t.database.db, 'Other');
    for (const url of [`/templates/${id}/edit`, `/templates/${id}`]) assert.equal((await other.session.get(url)).statusCode, 404, url);
    assert.equal((await other.session.post(`/templates/${id}/edit`, { name: 'Stolen', content: '<p>x</p>' })).statusCode, 404);
    assert.equal((await other.session.post(`/templates/${id}/preview`, { name: 'x', content: 'x' })).statusCode, 404);
    const still = await t.database.db.selectFrom('templates').select('name').where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(still.name, 'Renamed');
  });
});

describe('mail accounts', () => {
  test('create: the API’s messages; the SMTP check against a server on 127.0.0.1; check, disable, enable', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    assert.equal((await session.get('/mail-accounts/new')).statusCode, 200);
    const bad = { host: 'bad host!', port: 'abc', security: 'ssl', from_email: 'nope', username: 'u', daily_limit: '0' };
    const refused = await session.post('/mail-accounts', bad);
    assert.equal(refused.statusCode, 422);
    assertSameDetails(refused.body, await apiDetails(key, 'mail-accounts', { ...bad, daily_limit: 0 }));
    const half = { host: 'smtp.example.com', port: '587', security: 'starttls', from_email: 'a@example.com', username: 'u' };
    const refused2 = await session.post('/mail-accounts', half);
    assertSameDetails(refused2.body, await apiDetails(key, 'mail-accounts', { ...half, port: 587 }));

    // The login check fails where nothing answers SMTP; nothing is saved.
    const closed: Server = createServer((socket) => socket.end('not smtp\r\n'));
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const deadPort = (closed.address() as { port: number }).port;
    const failed = await session.post('/mail-accounts', { host: '127.0.0.1', port: String(deadPort), security: 'none', from_email: 'news@example.com', verify: 'on' });
    closed.close();
    assert.equal(failed.statusCode, 422);
    assert.match(failed.body, /<code>verify<\/code> SMTP login check failed: /);
    assert.doesNotMatch(failed.body, /not smtp/, 'the server’s words are never shown');
    const count = async () => (await t.database.db.selectFrom('mail_accounts').select('id').where('team_id', '=', teamId).execute()).length;
    assert.equal(await count(), 0);

    const created = await session.post('/mail-accounts', {
      host: '127.0.0.1', port: String(sink.port), security: 'none', from_email: 'News@Example.com', from_name: 'News', username: 'mailer', password: 's3cret', verify: 'on',
    });
    assert.equal(created.statusCode, 303, created.body);
    assert.equal(created.headers.location, '/mail-accounts?done=created_verified');
    const row = await t.database.db.selectFrom('mail_accounts').selectAll().where('team_id', '=', teamId).executeTakeFirstOrThrow();
    assert.equal(row.from_email, 'news@example.com');
    assert.notEqual(row.password_enc, null);
    const list = await session.get('/mail-accounts?done=created_verified');
    assert.match(list.body, /news@example\.com/);
    assert.match(list.body, /accepted the connection and the login/);
    assert.doesNotMatch(list.body, /s3cret/);

    const checked = await session.post(`/mail-accounts/${row.id}/verify`);
    assert.equal(checked.statusCode, 200);
    assert.match(checked.body, /news@example\.com: the server accepted/);

    assert.equal((await session.post(`/mail-accounts/${row.id}/disable`)).headers.location, '/mail-accounts?done=disabled');
    assert.equal((await t.database.db.selectFrom('mail_accounts').select('status').where('id', '=', row.id).executeTakeFirstOrThrow()).status, 'disabled');
    // A campaign cannot use a disabled account: the API says so, and so does the form.
    assert.match((await session.get('/mail-accounts')).body, /Enable<span class="sr"> news@example\.com/);
    assert.equal((await session.post(`/mail-accounts/${row.id}/enable`)).headers.location, '/mail-accounts?done=enabled');

    // Edit: the API's PATCH messages; an empty password keeps the saved one.
    const edit = await session.get(`/mail-accounts/${row.id}/edit`);
    assert.equal(edit.statusCode, 200);
    assert.match(edit.body, /value="mailer"/);
    assert.doesNotMatch(edit.body, /s3cret/);
    const badEdit = { host: '127.0.0.1', port: '70000', security: 'none', from_email: 'news@example.com', username: 'mailer', daily_limit: 'many' };
    const refusedEdit = await session.post(`/mail-accounts/${row.id}/edit`, badEdit);
    assert.equal(refusedEdit.statusCode, 422);
    assertSameDetails(refusedEdit.body, await apiDetails(key, `mail-accounts/${row.id}`, {
      host: '127.0.0.1', port: 70000, security: 'none', from_email: 'news@example.com', username: 'mailer', from_name: null, daily_limit: 'many', verify: false,
    }, 'PATCH'));
    const edited = await session.post(`/mail-accounts/${row.id}/edit`, {
      host: '127.0.0.1', port: String(sink.port), security: 'none', from_email: 'news@example.com', from_name: 'Newsroom', username: 'mailer', daily_limit: '250', verify: 'on',
    });
    assert.equal(edited.headers.location, '/mail-accounts?done=saved_verified', edited.body);
    const after_ = await t.database.db.selectFrom('mail_accounts').selectAll().where('id', '=', row.id).executeTakeFirstOrThrow();
    assert.equal(after_.from_name, 'Newsroom');
    assert.equal(after_.daily_limit, 250);
    assert.deepEqual(after_.password_enc, row.password_enc, 'the saved password is kept');

    const other = await signedIn(t.app, t.database.db, 'Other');
    assert.equal((await other.session.get(`/mail-accounts/${row.id}/edit`)).statusCode, 404);
    assert.equal((await other.session.post(`/mail-accounts/${row.id}/edit`, { host: 'evil.example.com', port: '25', security: 'none', from_email: 'x@example.com' })).statusCode, 404);
    for (const action of ['verify', 'disable', 'enable']) {
      assert.equal((await other.session.post(`/mail-accounts/${row.id}/${action}`)).statusCode, 404, action);
    }
    assert.doesNotMatch((await other.session.get('/mail-accounts')).body, /news@example\.com/);
    assert.equal((await t.database.db.selectFrom('mail_accounts').select('status').where('id', '=', row.id).executeTakeFirstOrThrow()).status, 'active');
  });
});

describe('campaigns', () => {
  test('create: the API’s refusals with its messages, then saved with its settings', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    const templateId = await insertTemplate(t.database.db, teamId);
    const accountId = await insertMailAccount(t.database.db, teamId);
    const disabled = await insertMailAccount(t.database.db, teamId, 'disabled');
    const form = await session.get('/campaigns/new');
    assert.equal(form.statusCode, 200);
    assert.match(form.body, new RegExp(`value="${templateId}"`));
    assert.match(form.body, new RegExp(`value="${accountId}"`));
    assert.doesNotMatch(form.body, new RegExp(`value="${disabled}"`), 'disabled accounts are not offered');

    // Nothing chosen, bad numbers: the schema's messages.
    const empty = await session.post('/campaigns', { name: 'W', contact_cooldown_interval: '-1', contact_daily_email_cap: 'x' });
    assert.equal(empty.statusCode, 422);
    assertSameDetails(empty.body, await apiDetails(key, 'campaigns', {
      name: 'W', template_ids: [], mail_account_ids: [], events: [], open_tracking: false, click_tracking: false,
      event_triggered_send: { enabled: false, contact_cooldown_interval: -1, contact_daily_email_cap: 'x' },
    }));
    // A forged disabled account and a blank name: the checks after the schema.
    const forged = { name: '  ', template_ids: templateId, mail_account_ids: disabled, events: 'contact.saved' };
    const refused = await session.post('/campaigns', forged);
    assert.equal(refused.statusCode, 422);
    assertSameDetails(refused.body, await apiDetails(key, 'campaigns', {
      name: '  ', template_ids: [templateId], mail_account_ids: [disabled], events: ['contact.saved'], open_tracking: false, click_tracking: false,
      event_triggered_send: { enabled: false },
    }));
    assert.equal((await t.database.db.selectFrom('campaigns').select('id').where('team_id', '=', teamId).execute()).length, 0);

    const created = await session.post('/campaigns', {
      name: 'Welcome', template_ids: templateId, mail_account_ids: accountId, events: 'lead.created', reply_to_email: 'Help@Example.com',
      contact_cooldown_interval: '60', contact_daily_email_cap: '2', open_tracking: 'on', enabled: 'on',
    });
    assert.equal(created.statusCode, 303, created.body);
    const id = String(created.headers.location).match(/^\/campaigns\/([0-9a-f-]{36})\?done=created$/)?.[1];
    assert.ok(id);
    const api = await t.app.inject({ method: 'GET', url: `/public/v1/email/campaigns/${id}`, headers: { 'x-api-key': key } });
    const sendData = api.json().campaign.campaign_sends[0].send_data;
    assert.deepEqual(sendData.event_triggered_send, { events: ['lead.created'], contact_cooldown_interval: 60, contact_daily_email_cap: 2, enabled: true });
    assert.equal(sendData.open_tracking, true);
    assert.equal(sendData.click_tracking, false);
    assert.equal(sendData.reply_to_email, 'help@example.com');
  });

  test('the campaign page: settings, its sends and its decisions; edit; another team gets 404', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    const templateId = await insertTemplate(t.database.db, teamId);
    const accountId = await insertMailAccount(t.database.db, teamId);
    const res = await t.app.inject({
      method: 'POST', url: '/public/v1/email/campaigns', headers: { 'x-api-key': key },
      payload: { name: 'Welcome <b>', template_ids: [templateId], mail_account_ids: [accountId], events: ['contact.saved'] },
    });
    const id = res.json().campaign.id as string;
    await addContacts(key, [{ email: 'ann@example.com', first_name: 'Ann' }, { email: 'gone@example.com' }]);
    await t.database.db.updateTable('contacts').set({ status: 'unsubscribed' }).where('team_id', '=', teamId).where('email', '=', 'gone@example.com').execute();
    for (const email of ['ann@example.com', 'gone@example.com']) {
      const submit = await t.app.inject({ method: 'POST', url: `/public/v1/email/campaigns/${id}/submit`, headers: { 'x-api-key': key }, payload: { email } });
      assert.equal(submit.statusCode, 202, submit.body);
    }
    const page = await session.get(`/campaigns/${id}`);
    assert.equal(page.statusCode, 200);
    assert.match(page.body, /<h1>Welcome &lt;b&gt;<\/h1>/);
    assert.match(page.body, /t-active/, 'the template by name');
    assert.match(page.body, /news@example\.com/, 'the account by address');
    const sends = page.body.slice(page.body.indexOf('id="sends"'), page.body.indexOf('id="decisions"'));
    assert.match(sends, /ann@example\.com[\s\S]*queued/);
    assert.doesNotMatch(sends, /gone@example\.com/);
    const decisions = page.body.slice(page.body.indexOf('id="decisions"'));
    assert.match(decisions, /gone@example\.com[\s\S]*skipped[\s\S]*the contact is unsubscribed/);
    assert.match(decisions, /ann@example\.com[\s\S]*sent/);
    assert.match(page.body, /\/campaigns\/[0-9a-f-]{36}\/stop/);
    assert.equal((await session.post(`/campaigns/${id}/stop`, { back: 'campaign' })).headers.location, `/campaigns/${id}?done=stopped`);

    const edit = await session.get(`/campaigns/${id}/edit`);
    assert.equal(edit.statusCode, 200);
    assert.match(edit.body, new RegExp(`value="${templateId}" checked`));
    const refused = await session.post(`/campaigns/${id}/edit`, {
      name: 'W', template_ids: templateId, mail_account_ids: accountId, events: 'contact.saved', reply_to_email: 'not an address', from_name: 'a\r\nb',
    });
    assert.equal(refused.statusCode, 422);
    assertSameDetails(refused.body, await apiDetails(key, `campaigns/${id}`, {
      name: 'W', template_ids: [templateId], mail_account_ids: [accountId], events: ['contact.saved'], open_tracking: false, click_tracking: false,
      event_triggered_send: { enabled: false }, from_name: 'a\r\nb', reply_to_name: '', reply_to_email: 'not an address',
    }, 'PATCH'));
    const saved = await session.post(`/campaigns/${id}/edit`, {
      name: 'Welcome v2', template_ids: templateId, mail_account_ids: accountId, events: ['contact.saved', 'sale.created'],
      contact_cooldown_interval: '0', contact_daily_email_cap: '5', click_tracking: 'on', enabled: 'on',
    });
    assert.equal(saved.statusCode, 303, saved.body);
    const api = (await t.app.inject({ method: 'GET', url: `/public/v1/email/campaigns/${id}`, headers: { 'x-api-key': key } })).json().campaign;
    assert.equal(api.name, 'Welcome v2');
    assert.equal(api.campaign_sends[0].status, 'paused', 'the edit leaves the status');
    assert.deepEqual(api.campaign_sends[0].send_data.event_triggered_send.events, ['contact.saved', 'sale.created']);
    assert.equal(api.campaign_sends[0].send_data.event_triggered_send.contact_daily_email_cap, 5);

    const other = await signedIn(t.app, t.database.db, 'Other');
    for (const url of [`/campaigns/${id}`, `/campaigns/${id}/edit`, '/campaigns/not-a-uuid']) assert.equal((await other.session.get(url)).statusCode, 404, url);
    const otherTemplate = await insertTemplate(t.database.db, other.teamId);
    const otherAccount = await insertMailAccount(t.database.db, other.teamId);
    const stolen = await other.session.post(`/campaigns/${id}/edit`, { name: 'Stolen', template_ids: otherTemplate, mail_account_ids: otherAccount, events: 'contact.saved' });
    assert.equal(stolen.statusCode, 404);
    // Their own form cannot name this team's template either.
    const cross = await other.session.post('/campaigns', { name: 'X', template_ids: templateId, mail_account_ids: otherAccount, events: 'contact.saved' });
    assert.equal(cross.statusCode, 422);
    assert.match(cross.body, new RegExp(`no active template ${templateId} in this team`));
    assert.equal((await t.database.db.selectFrom('campaigns').select('name').where('id', '=', id).executeTakeFirstOrThrow()).name, 'Welcome v2');
  });
});

describe('junk input', () => {
  test('odd fields, repeats, NUL characters and cursors on the new pages never give a 500', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db);
    const templateId = await insertTemplate(t.database.db, teamId);
    const accountId = await insertMailAccount(t.database.db, teamId);
    const campaign = await session.post('/campaigns', { name: 'J', template_ids: templateId, mail_account_ids: accountId, events: 'contact.saved' });
    const id = String(campaign.headers.location).match(/[0-9a-f-]{36}/)?.[0];
    assert.ok(id);
    const posts: [string, Record<string, string | string[]>][] = [
      ['/campaigns', { name: 'a\u0000b', template_ids: templateId, mail_account_ids: accountId, events: 'contact.saved' }],
      ['/campaigns', { name: 'x', template_ids: ['urn:uuid:x', 'zz'], mail_account_ids: [accountId, accountId], events: ['nope', 'contact_saved'] }],
      ['/campaigns', { 'template_ids[x]': '1', contact_cooldown_interval: '99999999999999999999', contact_daily_email_cap: '1.5' }],
      [`/campaigns/${id}/edit`, { name: 'J', template_ids: templateId, mail_account_ids: accountId, events: 'contact.saved', reply_to_email: 'a\u0000@x.com' }],
      ['/templates', { name: 'a\u0000', content: '\u0000{{', subject: 'x'.repeat(2000) }],
      ['/templates/preview', { content: '{{ x }}', sample_payload: 'x'.repeat(20_000), sample_event: 'evil', sample_contact: 'a'.repeat(400) }],
      [`/templates/${templateId}/edit`, { name: '', content: '' }],
      ['/mail-accounts', { host: '\u0000', port: '-1', security: ['tls', 'none'], from_email: 'a@b.c', username: 'a\u0000', password: 'p' }],
      [`/mail-accounts/${accountId}/edit`, { host: '::ffff:127.0.0.1', port: '25', security: 'none', from_email: 'a@b.co', password: 'p' }],
      [`/campaigns/${id}/start`, { back: ['campaign', 'x'] }],
    ];
    for (const [url, form] of posts) {
      const res = await session.post(url, form);
      assert.ok(res.statusCode < 500, `${url} ${JSON.stringify(form).slice(0, 80)}: ${res.statusCode} ${res.body.slice(0, 200)}`);
    }
    for (const url of [`/campaigns/${id}?sends_before=x&decisions_before=${'z'.repeat(5000)}`, `/campaigns/${id}?sends_before=${id}`, `/templates/${templateId}?sample_payload=%00&sample_event[]=1`, '/mail-accounts/00000000-0000-0000-0000-000000000000/edit', '/campaigns/00000000-0000-0000-0000-000000000000']) {
      const res = await session.get(url);
      assert.ok(res.statusCode < 500, `${url}: ${res.statusCode}`);
    }
  });
});
