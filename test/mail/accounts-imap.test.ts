// The mail-account contract carries its IMAP mailbox (host, port, security,
// user, password write-only, folder): create and update take an `imap` object
// (null removes it), checked with the host rules of the sub-resource and written
// in the account's transaction; every mail-account object shows `imap` without
// the password (null when none).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { imapPasswordBox } from '../../src/inbound/imap/settings.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';

const config = testConfig();
const SECRET = config.appSecret!;
const PUBLIC_HOST = '93.184.215.14';

describe('mail accounts: the imap field', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp({ config });
  });
  after(async () => {
    await t.close();
  });

  const call = (key: string, method: 'PATCH' | 'GET' | 'POST', url: string, payload?: unknown) =>
    t.app.inject({ method, url: `/public/v1/email/mail-accounts${url}`, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload: payload as object }) });
  const smtp = { host: '127.0.0.1', port: 2525, security: 'none', from_email: 'news@example.com' };
  const storedPassword = async (id: string) => {
    const { rows } = await t.database.pool.query('SELECT password_enc FROM mail_account_imap WHERE mail_account_id = $1', [id]);
    return rows.length ? imapPasswordBox(SECRET).open(rows[0].password_enc as Buffer) : null;
  };
  const count = async (teamId: string) =>
    Number((await t.database.pool.query('SELECT count(*) AS n FROM mail_accounts WHERE team_id = $1', [teamId])).rows[0].n);

  test('create with imap: shown without the password, sealed at rest; an account without one shows null', async () => {
    const { key } = await makeTeam(t.database.db);
    const res = await call(key, 'POST', '', { ...smtp, imap: { host: '127.0.0.1', port: 1143, security: 'none', user: 'bounces', password: 'imap-secret', folder: 'Bounces' } });
    assert.equal(res.statusCode, 201, res.body);
    const acc = res.json().mail_account;
    assert.deepEqual([acc.imap.host, acc.imap.port, acc.imap.security, acc.imap.user, acc.imap.folder], ['127.0.0.1', 1143, 'none', 'bounces', 'Bounces']);
    assert.ok(!res.body.includes('imap-secret'));
    assert.equal(await storedPassword(acc.id), 'imap-secret');
    const { rows } = await t.database.pool.query('SELECT password_enc FROM mail_account_imap WHERE mail_account_id = $1', [acc.id]);
    assert.equal((rows[0].password_enc as Buffer).includes(Buffer.from('imap-secret')), false);

    const plain = (await call(key, 'POST', '', smtp)).json().mail_account;
    assert.equal(plain.imap, null);
    const list = (await call(key, 'GET', '')).json().mail_accounts as { id: string; imap: { user: string } | null }[];
    assert.equal(list.find((a) => a.id === acc.id)!.imap!.user, 'bounces');
    assert.equal(list.find((a) => a.id === plain.id)!.imap, null);
    assert.equal((await call(key, 'GET', `/${acc.id}`)).json().mail_account.imap.folder, 'Bounces');
    // The documented sub-resource sees the same mailbox.
    assert.equal((await call(key, 'GET', `/${acc.id}/imap`)).json().imap.user, 'bounces');
  });

  test('create: a refused IMAP host or port, or a missing password, is 422 naming imap.* and saves nothing', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const strict = await buildTestApp({ config: { ...config, allowedPrivateTargets: [] }, database: t.database });
    try {
      const post = (body: object) =>
        strict.app.inject({ method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key }, payload: { ...smtp, host: PUBLIC_HOST, port: 587, ...body } });
      let r = await post({ imap: { host: '127.0.0.1', port: 993, user: 'u', password: 'p' } });
      assert.equal(r.statusCode, 422, r.body);
      assert.equal(r.json().error.details[0].field, 'imap.host');
      r = await post({ imap: { host: PUBLIC_HOST, port: 2525, user: 'u', password: 'p' } });
      assert.equal(r.statusCode, 422, r.body);
      assert.equal(r.json().error.details[0].field, 'imap.port');
      r = await post({ imap: { host: PUBLIC_HOST, port: 993, user: 'u' } });
      assert.equal(r.statusCode, 422, r.body);
      r = await post({ imap: { host: PUBLIC_HOST, port: 993, user: 'u\r\nX', password: 'p' } });
      assert.equal(r.statusCode, 422, r.body);
      assert.equal(r.json().error.details[0].field, 'imap.user');
      assert.equal(await count(teamId), 0);
      r = await post({ imap: { host: PUBLIC_HOST, port: 993, user: 'u', password: 'p' } });
      assert.equal(r.statusCode, 201, r.body);
      assert.equal(r.json().mail_account.imap.security, 'tls');
    } finally {
      await strict.app.close();
    }
  });

  test('PATCH sets, replaces (keeping the stored password when none is given) and removes the mailbox; other teams 404', async () => {
    const { key } = await makeTeam(t.database.db);
    const other = await makeTeam(t.database.db);
    const acc = (await call(key, 'POST', '', smtp)).json().mail_account;

    // Without a stored mailbox the password is required.
    let r = await call(key, 'PATCH', `/${acc.id}`, { imap: { host: '127.0.0.1', port: 1143, user: 'u' } });
    assert.equal(r.statusCode, 422, r.body);
    assert.equal(r.json().error.details[0].field, 'imap.password');
    assert.equal(await storedPassword(acc.id), null);

    r = await call(key, 'PATCH', `/${acc.id}`, { imap: { host: '127.0.0.1', port: 1143, user: 'u', password: 'first' } });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json().mail_account.imap.user, 'u');
    r = await call(key, 'PATCH', `/${acc.id}`, { from_name: 'Desk', imap: { host: '127.0.0.1', port: 1144, user: 'v', folder: 'Bounces' } });
    assert.equal(r.statusCode, 200, r.body);
    assert.deepEqual([r.json().mail_account.imap.port, r.json().mail_account.imap.user, r.json().mail_account.imap.folder], [1144, 'v', 'Bounces']);
    assert.equal(await storedPassword(acc.id), 'first');
    r = await call(key, 'PATCH', `/${acc.id}`, { imap: { host: '127.0.0.1', port: 1144, user: 'v', password: 'second' } });
    assert.equal(await storedPassword(acc.id), 'second');

    // A bad imap object changes nothing, not even the other fields of the patch.
    r = await call(key, 'PATCH', `/${acc.id}`, { from_name: 'Changed', imap: { host: 'bad host!', port: 993, user: 'v' } });
    assert.equal(r.statusCode, 422, r.body);
    assert.equal(r.json().error.details[0].field, 'imap.host');
    assert.equal((await call(key, 'GET', `/${acc.id}`)).json().mail_account.from_name, 'Desk');

    assert.equal((await call(other.key, 'PATCH', `/${acc.id}`, { imap: null })).statusCode, 404);
    assert.equal(await storedPassword(acc.id), 'second');

    r = await call(key, 'PATCH', `/${acc.id}`, { imap: null });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json().mail_account.imap, null);
    assert.equal(await storedPassword(acc.id), null);
    assert.equal((await call(key, 'GET', `/${acc.id}/imap`)).statusCode, 404);
  });
});
