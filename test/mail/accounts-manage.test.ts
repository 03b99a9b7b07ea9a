// PATCH and DELETE of mail accounts (issue 18): fields of create, the password
// write-only and sealed again, the host rules of create, verify with the
// updated settings, the pooled SMTP connection rebuilt (the next message logs
// in with the new credentials), 409 naming the campaigns that use an account,
// queued messages cancelled, soft delete, other teams 404.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { getMailAccountPassword } from '../../src/mail/accounts.ts';
import { deleteMailAccount } from '../../src/mail/accounts-manage.ts';
import { AppError } from '../../src/lib/errors.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { api, createCampaign, createTemplate, drain, sendLog } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { startSmtpSink, type SmtpSink } from './smtp-sink.ts';

const config = testConfig();
const SECRET = config.appSecret!;

describe('mail accounts: update and delete', () => {
  let t: TestApp;
  let sink: CaptureSink;
  let strict: SmtpSink;
  before(async () => {
    t = await buildTestApp({ config });
    sink = await startCaptureSink();
    strict = await startSmtpSink('mailer', 's3cret pass');
  });
  after(async () => {
    closeTransports();
    await Promise.all([sink.close(), strict.close()]);
    await t.close();
  });

  const call = (key: string, method: 'PATCH' | 'DELETE' | 'GET' | 'POST', url: string, payload?: unknown) =>
    t.app.inject({ method, url: `/public/v1/email/mail-accounts${url}`, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload: payload as object }) });

  async function account(key: string, body: Record<string, unknown> = {}) {
    const res = await call(key, 'POST', '', { host: '127.0.0.1', port: sink.port, security: 'none', from_email: 'news@example.com', ...body });
    assert.equal(res.statusCode, 201, res.body);
    return res.json().mail_account as { id: string; updated_at: string };
  }

  test('PATCH changes any field; the password is sealed again, never returned; the next message logs in with the new login', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    const acc = await account(key, { username: 'first', password: 'first-pass' });
    const templateId = await createTemplate(a);
    await createCampaign(a, { template_ids: [templateId], mail_account_ids: [acc.id], event_triggered_send: { contact_cooldown_interval: 0 } });
    const n0 = sink.messages.length;
    await a.post('/email/contacts/upsert', { email: 'one@example.com', first_name: 'One' });
    await drain(t, { config });
    await sink.waitFor(n0 + 1);
    assert.equal(sink.messages[n0]!.user, 'first');

    const res = await call(key, 'PATCH', `/${acc.id}`, {
      username: 'second', password: 'second-pass', from_name: 'News Desk', daily_limit: 1000, campaign_share_percent: 50,
    });
    assert.equal(res.statusCode, 200, res.body);
    const updated = res.json().mail_account;
    assert.equal(updated.username, 'second');
    assert.equal(updated.from_name, 'News Desk');
    assert.equal(updated.daily_limit, 1000);
    assert.equal(updated.campaign_share_percent, 50);
    assert.ok(!('password' in updated) && !('password_enc' in updated));
    assert.ok(!res.body.includes('second-pass'));
    assert.ok(updated.updated_at > acc.updated_at);
    assert.equal(await getMailAccountPassword(t.database.db, SECRET, teamId, acc.id), 'second-pass');
    const raw = await t.database.db.selectFrom('mail_accounts').select('password_enc').where('id', '=', acc.id).executeTakeFirstOrThrow();
    assert.ok(!raw.password_enc!.toString('latin1').includes('second-pass'), 'stored encrypted');

    // The pooled connection of the first login is not reused.
    await a.post('/email/contacts/upsert', { email: 'one@example.com', first_name: 'Two' });
    await drain(t, { config });
    await sink.waitFor(n0 + 2);
    assert.equal(sink.messages[n0 + 1]!.user, 'second');

    // A username alone keeps the stored password; username null removes the login.
    assert.equal((await call(key, 'PATCH', `/${acc.id}`, { username: 'third' })).statusCode, 200);
    assert.equal(await getMailAccountPassword(t.database.db, SECRET, teamId, acc.id), 'second-pass');
    const cleared = await call(key, 'PATCH', `/${acc.id}`, { username: null });
    assert.equal(cleared.json().mail_account.username, null);
    assert.equal(await getMailAccountPassword(t.database.db, SECRET, teamId, acc.id), null);
    // Disable and enable again.
    assert.equal((await call(key, 'PATCH', `/${acc.id}`, { status: 'disabled' })).json().mail_account.status, 'disabled');
    assert.equal((await call(key, 'PATCH', `/${acc.id}`, { status: 'active' })).json().mail_account.status, 'active');
  });

  test('PATCH errors: host rules as at create, login pairs, enums listed, empty body; nothing changes', async () => {
    const { key } = await makeTeam(t.database.db);
    const acc = await account(key);
    const cases: [Record<string, unknown>, string, RegExp?][] = [
      [{ host: '10.0.0.7' }, 'host', /ALLOWED_PRIVATE_TARGETS/],
      [{ host: 'not a host' }, 'host'],
      [{ password: 'lonely' }, 'username'],
      [{ username: 'nobody' }, 'password'],
      [{ security: 'ssl' }, 'security', /tls, starttls, none/],
      [{ status: 'gone' }, 'status', /active, disabled/],
      [{ port: 0 }, 'port'],
      [{ from_email: 'nope' }, 'from_email'],
      [{ from_name: 'a\nb' }, 'from_name'],
      [{ password: 'x' }, 'username'],
      [{}, '(body)'],
      [{ colour: 'red' }, 'colour'],
    ];
    for (const [body, field, message] of cases) {
      const res = await call(key, 'PATCH', `/${acc.id}`, body);
      assert.equal(res.statusCode, 422, `${JSON.stringify(body)}: ${res.body}`);
      const details = res.json().error.details as { field: string; message: string }[];
      const hit = details.find((d) => d.field === field);
      assert.ok(hit, `${field} in ${JSON.stringify(details)}`);
      if (message) assert.match(hit.message, message);
    }
    const after = (await call(key, 'GET', `/${acc.id}`)).json().mail_account;
    assert.equal(after.host, '127.0.0.1');
    assert.equal(after.updated_at, acc.updated_at);
  });

  test('PATCH with verify logs in with the updated settings (stored password when none is given); a failed login changes nothing', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const acc = await account(key, { port: strict.port, username: 'mailer', password: 'wrong pass' });
    const refused = await call(key, 'PATCH', `/${acc.id}`, { from_name: 'X', verify: true });
    assert.equal(refused.statusCode, 422, refused.body);
    assert.equal(refused.json().error.details[0].field, 'verify');
    assert.equal((await call(key, 'GET', `/${acc.id}`)).json().mail_account.from_name, null);
    const ok = await call(key, 'PATCH', `/${acc.id}`, { password: 's3cret pass', verify: true });
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(await getMailAccountPassword(t.database.db, SECRET, teamId, acc.id), 's3cret pass');
    const again = await call(key, 'PATCH', `/${acc.id}`, { from_name: 'Verified', verify: true });
    assert.equal(again.statusCode, 200, again.body);
  });

  test('DELETE: 409 naming the campaigns that use it; then its queued message is cancelled, the row kept for the log, 404 afterwards', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    const acc = await account(key, { username: 'u', password: 'p' });
    const spare = await account(key);
    const templateId = await createTemplate(a);
    const { id: campaignId } = await createCampaign(a, {
      name: 'Uses it', template_ids: [templateId], mail_account_ids: [acc.id], event_triggered_send: { contact_cooldown_interval: 0 },
    });
    const conflict = await call(key, 'DELETE', `/${acc.id}`);
    assert.equal(conflict.statusCode, 409, conflict.body);
    assert.match(conflict.json().error.message, /"Uses it"/);
    assert.deepEqual(conflict.json().error.details, [{ field: 'campaigns', message: `${campaignId} (Uses it)` }]);

    // A transactional message queued through the account, not yet sent.
    const submit = await a.post('/email/emails/submit', { template_id: templateId, mail_account_id: acc.id, to_email: 'tx@example.com' });
    assert.equal(submit.statusCode, 202, submit.body);
    const emailId = submit.json().email.id;
    // Move the campaign to the spare account; now the delete goes through.
    const moved = await t.app.inject({
      method: 'PATCH', url: `/public/v1/email/campaigns/${campaignId}`, headers: { 'x-api-key': key }, payload: { mail_account_ids: [spare.id] },
    });
    assert.equal(moved.statusCode, 200, moved.body);
    const n0 = sink.messages.length;
    const res = await call(key, 'DELETE', `/${acc.id}`);
    assert.equal(res.statusCode, 200, res.body);
    await drain(t, { config });
    const row = (await sendLog(t, teamId)).find((r) => r.id === emailId)!;
    assert.equal(row.status, 'cancelled');
    assert.equal(row.mail_account_id, acc.id, 'the log keeps its account');
    assert.equal(sink.messages.length, n0, 'nothing sent through the deleted account');
    const kept = await t.database.db.selectFrom('mail_accounts').select(['deleted_at', 'status', 'password_enc']).where('id', '=', acc.id).executeTakeFirstOrThrow();
    assert.ok(kept.deleted_at);
    assert.equal(kept.status, 'disabled');
    assert.equal(kept.password_enc, null, 'the password is erased');

    assert.equal((await call(key, 'GET', `/${acc.id}`)).statusCode, 404);
    assert.ok(!(await call(key, 'GET', '')).json().mail_accounts.some((m: { id: string }) => m.id === acc.id));
    assert.equal((await call(key, 'PATCH', `/${acc.id}`, { from_name: 'x' })).statusCode, 404);
    assert.equal((await call(key, 'DELETE', `/${acc.id}`)).statusCode, 404);
    // A campaign cannot name it any more.
    const reuse = await t.app.inject({
      method: 'PATCH', url: `/public/v1/email/campaigns/${campaignId}`, headers: { 'x-api-key': key }, payload: { mail_account_ids: [acc.id] },
    });
    assert.equal(reuse.statusCode, 422, reuse.body);
  });

  test('DELETE of an account nothing references removes the row', async () => {
    const { key } = await makeTeam(t.database.db);
    const acc = await account(key);
    assert.equal((await call(key, 'DELETE', `/${acc.id}`)).statusCode, 200);
    assert.equal((await t.database.db.selectFrom('mail_accounts').select('id').where('id', '=', acc.id).execute()).length, 0);
  });

  test('another team: PATCH and DELETE are 404, the function too, and nothing changes', async () => {
    const owner = await makeTeam(t.database.db);
    const other = await makeTeam(t.database.db);
    const acc = await account(owner.key);
    for (const url of [`/${acc.id}`, '/00000000-0000-7000-8000-000000000000', '/not-a-uuid']) {
      assert.equal((await call(other.key, 'PATCH', url, { from_name: 'Stolen' })).statusCode, 404, url);
      assert.equal((await call(other.key, 'DELETE', url)).statusCode, 404, url);
    }
    await assert.rejects(deleteMailAccount(t.database.db, other.teamId, acc.id), (e: unknown) => e instanceof AppError && e.code === 'NOT_FOUND');
    const still = (await call(owner.key, 'GET', `/${acc.id}`)).json().mail_account;
    assert.equal(still.from_name, null);
  });
});
