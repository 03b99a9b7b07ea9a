// The mail-account fields of mail that comes back: `verp` and
// `capture_replies` default to false, are shown, and need INBOUND_DOMAIN
// (422 naming the field without it; nothing saved).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';

const body = { host: '127.0.0.1', port: 2525, security: 'none', from_email: 'news@example.com' };

describe('mail accounts: verp and capture_replies', () => {
  let without: TestApp;
  let withDomain: TestApp;
  before(async () => {
    without = await buildTestApp();
    const base = testConfig();
    withDomain = await buildTestApp({ config: { inbound: { ...base.inbound, domain: 'bounces.example.com' } } });
  });
  after(async () => {
    await without.close();
    await withDomain.close();
  });

  const create = (t: TestApp, key: string, extra: Record<string, unknown>) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key }, payload: { ...body, ...extra } });

  test('default false and shown; true without INBOUND_DOMAIN is 422 naming the field, nothing saved', async () => {
    const { key, teamId } = await makeTeam(without.database.db);
    const plain = await create(without, key, {});
    assert.equal(plain.statusCode, 201, plain.body);
    assert.equal(plain.json().mail_account.verp, false);
    assert.equal(plain.json().mail_account.capture_replies, false);
    const refused = await create(without, key, { verp: true, capture_replies: true });
    assert.equal(refused.statusCode, 422, refused.body);
    assert.deepEqual(refused.json().error.details.map((d: any) => d.field).sort(), ['capture_replies', 'verp']);
    const n = await without.database.db.selectFrom('mail_accounts').select((eb) => eb.fn.countAll<string>().as('n')).where('team_id', '=', teamId).executeTakeFirstOrThrow();
    assert.equal(Number(n.n), 1);
    const list = await without.app.inject({ method: 'GET', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key } });
    assert.equal(list.json().mail_accounts[0].verp, false);
  });

  test('with INBOUND_DOMAIN both are saved and shown', async () => {
    const { key } = await makeTeam(withDomain.database.db);
    const res = await create(withDomain, key, { verp: true, capture_replies: true });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.json().mail_account.verp, true);
    assert.equal(res.json().mail_account.capture_replies, true);
    const bad = await create(withDomain, key, { verp: 'yes' });
    assert.equal(bad.statusCode, 422, bad.body);
  });

  const patch = (t: TestApp, key: string, id: string, payload: Record<string, unknown>) =>
    t.app.inject({ method: 'PATCH', url: `/public/v1/email/mail-accounts/${id}`, headers: { 'x-api-key': key }, payload });

  test('PATCH takes both under the same rule: 422 without INBOUND_DOMAIN (nothing changed), saved and shown with it', async () => {
    const a = await makeTeam(without.database.db);
    const made = await create(without, a.key, {});
    const id = made.json().mail_account.id;
    const refused = await patch(without, a.key, id, { verp: true, from_name: 'Changed' });
    assert.equal(refused.statusCode, 422, refused.body);
    assert.deepEqual(refused.json().error.details.map((d: any) => d.field), ['verp']);
    const still = await without.database.db.selectFrom('mail_accounts').select(['verp', 'from_name']).where('id', '=', id).executeTakeFirstOrThrow();
    assert.deepEqual(still, { verp: false, from_name: null });
    assert.equal((await patch(without, a.key, id, { verp: false })).statusCode, 200);

    const b = await makeTeam(withDomain.database.db);
    const other = await create(withDomain, b.key, {});
    const bid = other.json().mail_account.id;
    const on = await patch(withDomain, b.key, bid, { verp: true, capture_replies: true });
    assert.equal(on.statusCode, 200, on.body);
    assert.equal(on.json().mail_account.verp, true);
    assert.equal(on.json().mail_account.capture_replies, true);
    const off = await patch(withDomain, b.key, bid, { capture_replies: false });
    assert.equal(off.json().mail_account.verp, true, 'a field the patch does not name stays');
    assert.equal(off.json().mail_account.capture_replies, false);
  });
});
