import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { byJson } from '../lib/order.ts';
import { startSmtpSink, type SmtpSink } from './smtp-sink.ts';

type Res = { statusCode: number; body: string; json(): any };

function assert422(res: Res, fields: string[]) {
  assert.equal(res.statusCode, 422, res.body);
  const error = res.json().error;
  assert.equal(error.code, 'VALIDATION_FAILED');
  assert.deepEqual([...new Set(error.details.map((d: { field: string }) => d.field))].sort(byJson), [...fields].sort(byJson), JSON.stringify(error.details));
  return error.details as { field: string; message: string }[];
}

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('mail accounts: validation and failed logins', () => {
  let t: TestApp;
  let smtp: SmtpSink;
  let key: string;
  let teamId: string;
  before(async () => {
    t = await buildTestApp();
    smtp = await startSmtpSink('mailer', 'right password');
    ({ key, teamId } = await makeTeam(t.database.db));
  });
  after(async () => {
    await smtp.close();
    await t.close();
  });

  const valid = { host: 'smtp.example.com', port: 587, security: 'starttls', from_email: 'a@example.com' };
  const create = (body: unknown) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key }, payload: body as object });
  const count = async () =>
    Number(
      (await t.database.db.selectFrom('mail_accounts').select((eb) => eb.fn.countAll().as('n')).where('team_id', '=', teamId).executeTakeFirstOrThrow()).n,
    );

  test('verify: a refused login is 422 with a verify detail, and nothing is saved', async () => {
    const before = await count();
    const seen = smtp.logins.length;
    const res = await create({
      host: '127.0.0.1',
      port: smtp.port,
      security: 'none',
      username: 'mailer',
      password: 'wrong password',
      from_email: 'a@example.com',
      verify: true,
    });
    const details = assert422(res, ['verify']);
    // A fixed message: the server's own refusal text is not passed on (verify is no probe).
    assert.equal(details[0].message, 'SMTP login check failed: login refused');
    assert.deepEqual(smtp.logins.slice(seen), [{ username: 'mailer', password: 'wrong password', accepted: false }]);
    assert.ok(!res.body.includes('wrong password'), 'the password is not echoed in the error');
    assert.equal(await count(), before);
  });

  test('verify: starttls against a server that does not offer STARTTLS fails (no silent downgrade)', async () => {
    const before = await count();
    const seen = smtp.logins.length;
    const res = await create({
      host: '127.0.0.1',
      port: smtp.port,
      security: 'starttls',
      username: 'mailer',
      password: 'right password',
      from_email: 'a@example.com',
      verify: true,
    });
    const details = assert422(res, ['verify']);
    assert.equal(details[0].message, 'SMTP login check failed: TLS handshake failed');
    assert.equal(smtp.logins.length, seen, 'the password was never sent over the plain connection');
    assert.equal(await count(), before);
  });

  test('verify: an unreachable server is 422', async () => {
    const before = await count();
    const res = await create({ ...valid, host: '127.0.0.1', port: await closedPort(), security: 'none', verify: true });
    const details = assert422(res, ['verify']);
    assert.equal(details[0].message, 'SMTP login check failed: could not connect');
    assert.equal(await count(), before);
  });

  test('without verify, nothing connects: a dead host is saved as given', async () => {
    const res = await create({ ...valid, host: '127.0.0.1', port: await closedPort() });
    assert.equal(res.statusCode, 201, res.body);
  });

  test('every field rule', async () => {
    const before = await count();
    const cases: [Record<string, unknown>, string[]][] = [
      [{ port: 587, security: 'tls', from_email: 'a@example.com' }, ['host']],
      [{ ...valid, host: '' }, ['host']],
      [{ ...valid, host: 'not a host!' }, ['host']],
      [{ ...valid, host: 'smtp_.example.com' }, ['host']],
      [{ ...valid, host: `${'a'.repeat(63)}.`.repeat(4) + 'com' }, ['host']],
      [{ ...valid, host: 'x'.repeat(256) }, ['host']],
      [{ ...valid, host: 'smtp://smtp.example.com' }, ['host']],
      [{ ...valid, port: undefined }, ['port']],
      [{ ...valid, port: 0 }, ['port']],
      [{ ...valid, port: 65536 }, ['port']],
      [{ ...valid, port: '587' }, ['port']],
      [{ ...valid, port: 58.7 }, ['port']],
      [{ ...valid, security: undefined }, ['security']],
      [{ ...valid, security: 'ssl' }, ['security']],
      [{ ...valid, from_email: undefined }, ['from_email']],
      [{ ...valid, from_email: 'not an address' }, ['from_email']],
      [{ ...valid, from_name: 'x'.repeat(256) }, ['from_name']],
      [{ ...valid, from_name: 'Evil\r\nBcc: x@example.com' }, ['from_name']],
      [{ ...valid, daily_limit: 0 }, ['daily_limit']],
      [{ ...valid, daily_limit: 1_000_001 }, ['daily_limit']],
      [{ ...valid, daily_limit: 1.5 }, ['daily_limit']],
      [{ ...valid, verify: 'yes' }, ['verify']],
      [{ ...valid, password: 'p' }, ['username']],
      [{ ...valid, username: 'u' }, ['password']],
      [{ ...valid, username: '', password: '' }, ['username', 'password']],
      [{ ...valid, status: 'disabled' }, ['status']],
      [{ ...valid, password_enc: 'x' }, ['password_enc']],
      [{ ...valid, username: 'u\u0000', password: 'p\u0000w', from_name: 'N\u0000' }, ['username', 'password', 'from_name']],
      [{ host: 'x y', port: -1, security: 'x', from_email: 'x' }, ['port', 'security', 'from_email']],
    ];
    for (const [body, fields] of cases) assert422(await create(body), fields);
    assert.equal(await count(), before, 'nothing saved');
  });

  test('list: per_page 0 and 101, page 0 are 422', async () => {
    for (const query of ['per_page=0', 'per_page=101', 'page=0', 'page=x']) {
      const res = await t.app.inject({ url: `/public/v1/email/mail-accounts?${query}`, headers: { 'x-api-key': key } });
      assert.equal(res.statusCode, 422, query);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    }
    const past = await t.app.inject({ url: '/public/v1/email/mail-accounts?page=1000000', headers: { 'x-api-key': key } });
    assert.equal(past.statusCode, 200, past.body);
    assert.deepEqual(past.json().mail_accounts, []);
    const far = await t.app.inject({ url: '/public/v1/email/mail-accounts?page=100000000000000000000', headers: { 'x-api-key': key } });
    assert.equal(far.statusCode, 422, far.body);
  });

  test('a non-UUID or unknown id is 404', async () => {
    for (const id of ['nope', 'urn:uuid:0190a6c8-0000-7000-8000-000000000000', '0190a6c8-0000-7000-8000-000000000000']) {
      const res = await t.app.inject({ url: `/public/v1/email/mail-accounts/${encodeURIComponent(id)}`, headers: { 'x-api-key': key } });
      assert.equal(res.statusCode, 404, `${id}: ${res.body}`);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
  });
});
