import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { getMailAccountPassword } from '../../src/mail/accounts.ts';
import { SecretBox } from '../../src/lib/secrets.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

const PASSWORD = 'Pa55word-that-must-never-leak';

describe('mail accounts: secrets and team isolation', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const create = (key: string, body: Record<string, unknown> = {}) =>
    t.app.inject({
      method: 'POST',
      url: '/public/v1/email/mail-accounts',
      headers: { 'x-api-key': key },
      payload: { host: 'smtp.example.com', port: 465, security: 'tls', username: 'user', password: PASSWORD, from_email: 'a@example.com', ...body },
    });

  test('the password is in no response: create, list, get', async () => {
    const { key } = await makeTeam(t.database.db);
    const created = await create(key);
    assert.equal(created.statusCode, 201, created.body);
    const id = created.json().mail_account.id;
    const row = await t.database.db.selectFrom('mail_accounts').select('password_enc').where('id', '=', id).executeTakeFirstOrThrow();
    const sealed = row.password_enc!;
    const responses = [
      created,
      await t.app.inject({ url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key } }),
      await t.app.inject({ url: `/public/v1/email/mail-accounts/${id}`, headers: { 'x-api-key': key } }),
    ];
    for (const res of responses) {
      assert.ok(res.statusCode < 300, res.body);
      assert.ok(!res.body.includes(PASSWORD), res.body);
      assert.ok(!/password/i.test(res.body), `no password field: ${res.body}`);
      assert.ok(!res.body.includes(sealed.toString('base64')) && !res.body.includes(sealed.toString('hex')), 'nor its ciphertext');
    }
  });

  test('password_enc is ciphertext that opens back to the password with the app secret, and only with it', async () => {
    const { key } = await makeTeam(t.database.db);
    const id = (await create(key)).json().mail_account.id;
    const row = await t.database.db.selectFrom('mail_accounts').select('password_enc').where('id', '=', id).executeTakeFirstOrThrow();
    const sealed = row.password_enc!;
    assert.ok(Buffer.isBuffer(sealed));
    assert.ok(!sealed.includes(Buffer.from(PASSWORD)), 'not stored in clear');
    assert.equal(new SecretBox(process.env.APP_SECRET!, 'mail-account-password').open(sealed), PASSWORD);
    assert.throws(() => new SecretBox('another-secret-another-secret-0000', 'mail-account-password').open(sealed));
    assert.throws(() => new SecretBox(process.env.APP_SECRET!, 'webhook-secret').open(sealed), 'a key per purpose');

    // The same password twice gives two different ciphertexts (random nonce).
    const id2 = (await create(key)).json().mail_account.id;
    const row2 = await t.database.db.selectFrom('mail_accounts').select('password_enc').where('id', '=', id2).executeTakeFirstOrThrow();
    assert.ok(!sealed.equals(row2.password_enc!));
  });

  test("another team's account is 404 on get, absent from lists, and its password is not readable", async () => {
    const a = await makeTeam(t.database.db, 'A');
    const b = await makeTeam(t.database.db, 'B');
    const acc = (await create(a.key, { host: 'private.a.example' })).json().mail_account;
    await create(b.key, { host: 'smtp.b.example' });

    const got = await t.app.inject({ url: `/public/v1/email/mail-accounts/${acc.id}`, headers: { 'x-api-key': b.key } });
    assert.equal(got.statusCode, 404);
    assert.ok(!got.body.includes('private.a.example'));

    const list = (await t.app.inject({ url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': b.key } })).json();
    assert.deepEqual(list.mail_accounts.map((x: { host: string }) => x.host), ['smtp.b.example']);
    assert.equal(list.meta.total, '1');

    await assert.rejects(getMailAccountPassword(t.database.db, process.env.APP_SECRET!, b.teamId, acc.id), { code: 'NOT_FOUND' });
    assert.equal(await getMailAccountPassword(t.database.db, process.env.APP_SECRET!, a.teamId, acc.id), PASSWORD);
  });

  test('every mail account route needs a key', async () => {
    for (const [method, url] of [
      ['GET', '/public/v1/email/mail-accounts'],
      ['POST', '/public/v1/email/mail-accounts'],
      ['GET', '/public/v1/email/mail-accounts/0190a6c8-0000-7000-8000-000000000000'],
    ] as const) {
      const res = await t.app.inject({ method, url });
      assert.equal(res.statusCode, 401, `${method} ${url}`);
    }
  });
});
