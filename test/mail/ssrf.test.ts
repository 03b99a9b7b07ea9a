// SMTP hosts get the webhook address rules (SSRF): refused at create, at
// verify and at connect time, with a port rule for public hosts, and a verify
// that never passes on what the remote end said.
import assert from 'node:assert/strict';
import net, { type AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { SMTPServer } from 'smtp-server';
import { parseAllowList } from '../../src/lib/net-guard.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { verifySmtpLogin } from '../../src/mail/transport.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { createCampaign, drain, sendLog, setup } from '../engine/fixtures.ts';
import { PUBLIC_LITERALS, REFUSED_LITERALS, REFUSED_NUMERIC } from '../lib/address-forms.ts';

const SECRET = 'SECRET-REMOTE-TEXT-7Q';

/** An SMTP server on 127.0.0.1 that counts connections; its banner and refusals carry SECRET. */
async function countingSink(opts: { refuseLogin?: boolean } = {}) {
  let connections = 0;
  let delivered = 0;
  const server = new SMTPServer({
    secure: false,
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    authOptional: true,
    banner: `${SECRET} banner`,
    logger: false,
    closeTimeout: 100,
    onConnect(_session, callback) {
      connections++;
      callback();
    },
    onAuth(auth, _session, callback) {
      if (opts.refuseLogin) return callback(Object.assign(new Error(`${SECRET} no such user`), { responseCode: 535 }));
      callback(null, { user: auth.username });
    },
    onData(stream, _session, callback) {
      stream.resume();
      stream.on('end', () => (delivered++, callback()));
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    port: (server.server.address() as AddressInfo).port,
    get connections() { return connections; },
    get delivered() { return delivered; },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A TCP server on 127.0.0.1 that answers like something other than SMTP, then hangs up. */
async function rawServer(greeting: string) {
  const server = net.createServer((socket) => socket.end(greeting));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { port: (server.address() as AddressInfo).port, close: () => new Promise<void>((r) => server.close(() => r())) };
}

const account = (host: string, port: number, extra: Record<string, unknown> = {}) => ({
  host, port, security: 'none', from_email: 'news@example.com', ...extra,
});

describe('mail accounts: host rules at create (no private target allowed)', () => {
  let t: TestApp;
  before(async () => {
    const dns = async (h: string) => ({ 'rebind.example.com': ['93.184.215.14', '0:0:0:0:0:ffff:a9fe:a9fe'], 'ok.example.com': ['93.184.215.14'] })[h] ?? [];
    t = await buildTestApp({ config: { allowedPrivateTargets: [] }, deps: { resolveHost: dns } });
  });
  after(() => t.close());

  const create = (key: string, body: object) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key }, payload: body });

  test('every non-public form and local name is 422 naming host and ALLOWED_PRIVATE_TARGETS; nothing is saved', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    for (const host of [...REFUSED_LITERALS, ...REFUSED_NUMERIC, 'localhost', 'LocalHost.', 'smtp.localhost', 'mailhost', 'rebind.example.com']) {
      const res = await create(key, account(host, 587));
      assert.equal(res.statusCode, 422, `${host}: ${res.body}`);
      const { error } = res.json();
      assert.equal(error.code, 'VALIDATION_FAILED');
      assert.deepEqual(error.details.map((d: { field: string }) => d.field), ['host'], host);
      assert.match(error.details[0].message, /ALLOWED_PRIVATE_TARGETS/, host);
    }
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM mail_accounts WHERE team_id = $1', [teamId]);
    assert.equal(rows[0].n, 0);
  });

  test('public addresses and names pass; a name that does not resolve yet is accepted (checked at every connection)', async () => {
    const { key } = await makeTeam(t.database.db);
    for (const host of [...PUBLIC_LITERALS, 'ok.example.com', 'not-yet.example.com']) {
      const res = await create(key, account(host, 587));
      assert.equal(res.statusCode, 201, `${host}: ${res.body}`);
    }
  });

  test('a public host may use only ports 25, 465, 587 and 2525', async () => {
    const { key } = await makeTeam(t.database.db);
    for (const port of [25, 465, 587, 2525]) assert.equal((await create(key, account('93.184.215.14', port))).statusCode, 201, String(port));
    for (const [host, port] of [['93.184.215.14', 22], ['93.184.215.14', 6379], ['ok.example.com', 80], ['not-yet.example.com', 3306]] as const) {
      const res = await create(key, account(host, port));
      assert.equal(res.statusCode, 422, `${host}:${port}`);
      assert.deepEqual(res.json().error.details.map((d: { field: string }) => d.field), ['port']);
      assert.match(res.json().error.details[0].message, /25, 465, 587, 2525.*ALLOWED_PRIVATE_TARGETS/);
    }
  });

  test('verify: true to a refused host is 422 before any connection', async () => {
    const sink = await countingSink();
    try {
      const { key } = await makeTeam(t.database.db);
      for (const host of ['127.0.0.1', '0:0:0:0:0:ffff:7f00:1', 'localhost']) {
        const res = await create(key, account(host, sink.port, { verify: true }));
        assert.equal(res.statusCode, 422, host);
        assert.equal(res.json().error.details[0].field, 'host');
      }
      assert.equal(sink.connections, 0, 'nothing connected');
    } finally {
      await sink.close();
    }
  });
});

describe('mail accounts: an allowed private host', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp({ config: { allowedPrivateTargets: ['127.0.0.0/8', 'localhost', '::1'] } });
  });
  after(() => t.close());

  const create = (key: string, body: object) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/mail-accounts', headers: { 'x-api-key': key }, payload: body });

  test('may use any port', async () => {
    const { key } = await makeTeam(t.database.db);
    for (const host of ['127.0.0.1', 'localhost', '::1', '::ffff:127.0.0.1']) {
      assert.equal((await create(key, account(host, 22))).statusCode, 201, host);
    }
    assert.equal((await create(key, account('10.0.0.1', 25))).statusCode, 422, 'only what is listed');
  });

  test('verify never passes on the remote banner or error text, only a fixed message', async () => {
    const { key } = await makeTeam(t.database.db);
    const refusing = await countingSink({ refuseLogin: true });
    const ssh = await rawServer(`SSH-2.0-${SECRET}\r\n`);
    const rejecting = await rawServer(`554 ${SECRET} go away\r\n`);
    const closed = await rawServer('');
    await closed.close();
    try {
      const cases = [
        [refusing.port, { username: 'u', password: 'p' }, /login refused/],
        [ssh.port, {}, /did not answer as an SMTP server/],
        [rejecting.port, {}, /could not connect|did not answer as an SMTP server/],
        [closed.port, {}, /could not connect/],
      ] as const;
      for (const [port, creds, expected] of cases) {
        const res = await create(key, account('127.0.0.1', port, { verify: true, ...creds }));
        assert.equal(res.statusCode, 422, res.body);
        assert.ok(!res.body.includes(SECRET), `the remote text leaked: ${res.body}`);
        assert.ok(!res.body.includes('banner'), res.body);
        assert.equal(res.json().error.details[0].field, 'verify');
        assert.match(res.json().error.details[0].message, expected);
      }
      assert.ok(refusing.connections > 0, 'the login was really tried');
      const ok = await countingSink();
      try {
        assert.equal((await create(key, account('localhost', ok.port, { verify: true }))).statusCode, 201);
      } finally {
        await ok.close();
      }
    } finally {
      await Promise.all([refusing.close(), ssh.close(), rejecting.close()]);
    }
  });
});

describe('SMTP connections are checked at connect time (DNS rebinding)', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(async () => {
    closeTransports();
    await t.close();
  });

  test('verify to a name that now resolves to loopback connects to nothing', async () => {
    const sink = await countingSink();
    try {
      const strict = parseAllowList([]);
      await assert.rejects(
        verifySmtpLogin({ host: 'localhost', port: sink.port, security: 'none', username: null }, null, strict),
        /refused to connect to localhost: 127\.0\.0\.1 is not a public address.*ALLOWED_PRIVATE_TARGETS/,
      );
      await assert.rejects(
        verifySmtpLogin({ host: '127.0.0.1', port: sink.port, security: 'none', username: null }, null, strict),
        /ALLOWED_PRIVATE_TARGETS/,
      );
      assert.equal(sink.connections, 0);
    } finally {
      await sink.close();
    }
  });

  test('a send to an account whose host resolves to loopback fails naming the setting; nothing connects', async () => {
    const sink = await countingSink();
    try {
      const s = await setup(t, sink.port);
      // As if the host had resolved to a public address when saved and to 127.0.0.1 now.
      await t.database.pool.query("UPDATE mail_accounts SET host = 'localhost' WHERE id = $1", [s.accountId]);
      await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
      assert.equal((await s.a.post('/email/contacts/upsert', { email: 'rebind@example.com' })).statusCode, 200);
      await drain(t, { config: { allowedPrivateTargets: [] } });
      const [log] = await sendLog(t, s.teamId);
      assert.equal(log!.status, 'failed', 'refused for good, not retried');
      assert.match(log!.last_error ?? '', /refused to connect to localhost: 127\.0\.0\.1 is not a public address.*ALLOWED_PRIVATE_TARGETS/);
      assert.equal(sink.connections, 0, 'nothing reached the SMTP server');

      // The control: the same account with loopback allowed sends (so the sink and the path work).
      const c = await setup(t, sink.port);
      await t.database.pool.query("UPDATE mail_accounts SET host = 'localhost' WHERE id = $1", [c.accountId]);
      await createCampaign(c.a, { template_ids: [c.templateId], mail_account_ids: [c.accountId] });
      await c.a.post('/email/contacts/upsert', { email: 'allowed@example.com' });
      await drain(t);
      assert.equal((await sendLog(t, c.teamId))[0]!.status, 'sent');
      assert.equal(sink.delivered, 1);
    } finally {
      await sink.close();
    }
  });

  test('a send to a public host on a non-SMTP port is refused at connect time', async () => {
    // Never connects: the port rule refuses before any socket is opened.
    const s = await setup(t, 22);
    await t.database.pool.query("UPDATE mail_accounts SET host = '93.184.215.14' WHERE id = $1", [s.accountId]);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await s.a.post('/email/contacts/upsert', { email: 'port@example.com' });
    await drain(t, { config: { allowedPrivateTargets: [] } });
    const [log] = await sendLog(t, s.teamId);
    assert.equal(log!.status, 'failed');
    assert.match(log!.last_error ?? '', /port 22 is not an SMTP port.*ALLOWED_PRIVATE_TARGETS/);
  });
});
