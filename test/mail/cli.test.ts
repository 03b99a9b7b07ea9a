import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseSmtpUrl } from '../../src/cli.ts';
import { getMailAccountPassword } from '../../src/mail/accounts.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { startSmtpSink, type SmtpSink } from './smtp-sink.ts';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');

type Run = { code: number; stdout: string; stderr: string };

function plover(url: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...process.env, DATABASE_URL: url } }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('plover mail-account create', () => {
  let t: TestApp;
  let smtp: SmtpSink;
  before(async () => {
    t = await buildTestApp();
    smtp = await startSmtpSink('cli user@example.com', 'p@ss:word/1');
  });
  after(async () => {
    await smtp.close();
    await t.close();
  });

  const account = (id: string) => t.database.db.selectFrom('mail_accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const count = async (teamId: string) =>
    Number(
      (await t.database.db.selectFrom('mail_accounts').select((eb) => eb.fn.countAll().as('n')).where('team_id', '=', teamId).executeTakeFirstOrThrow()).n,
    );

  test('--json prints exactly {"mail_account_id"}; the row holds the decoded, encrypted credentials', async () => {
    const { teamId, key } = await makeTeam(t.database.db);
    const r = await plover(t.database.url, [
      'mail-account', 'create', '--team', teamId,
      '--smtp-url', 'smtps://news%40example.com:p%40ss%3Aw%2Frd@smtp.example.com',
      '--from-email', 'news@example.com', '--from-name', 'Example News', '--daily-limit', '1200', '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    assert.equal(lines.length, 1);
    const out = JSON.parse(lines[0]);
    assert.deepEqual(Object.keys(out), ['mail_account_id']);
    const row = await account(out.mail_account_id);
    assert.equal(row.team_id, teamId);
    assert.equal(row.host, 'smtp.example.com');
    assert.equal(row.port, 465, 'smtps:// defaults to 465');
    assert.equal(row.security, 'tls');
    assert.equal(row.username, 'news@example.com');
    assert.equal(row.from_email, 'news@example.com');
    assert.equal(row.from_name, 'Example News');
    assert.equal(row.daily_limit, 1200);
    assert.ok(!row.password_enc!.includes(Buffer.from('p@ss:w/rd')));
    assert.equal(await getMailAccountPassword(t.database.db, process.env.APP_SECRET!, teamId, row.id), 'p@ss:w/rd');
    // And the API shows it to the team.
    const api = await t.app.inject({ url: `/public/v1/email/mail-accounts/${row.id}`, headers: { 'x-api-key': key } });
    assert.equal(api.statusCode, 200);
  });

  test('smtp:// defaults to STARTTLS on port 587; --security none and an explicit port are kept', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const a = await plover(t.database.url, ['mail-account', 'create', '--team', teamId, '--smtp-url', 'smtp://u:p@mx.example.com', '--from-email', 'a@example.com', '--json']);
    assert.equal(a.code, 0, a.stderr);
    const rowA = await account(JSON.parse(a.stdout).mail_account_id);
    assert.deepEqual([rowA.security, rowA.port, rowA.daily_limit], ['starttls', 587, 500]);

    const b = await plover(t.database.url, [
      'mail-account', 'create', '--team', teamId, '--smtp-url', 'smtp://relay.internal:25', '--security', 'none', '--from-email', 'b@example.com',
    ]);
    assert.equal(b.code, 0, b.stderr);
    assert.match(b.stdout, /^mail account [0-9a-f-]{36} created: none relay\.internal:25/);
    const id = b.stdout.match(/[0-9a-f-]{36}/)![0];
    const rowB = await account(id);
    assert.deepEqual([rowB.security, rowB.port, rowB.username, rowB.password_enc], ['none', 25, null, null]);
  });

  test('--verify logs in to a real SMTP server before saving', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const seen = smtp.logins.length;
    const r = await plover(t.database.url, [
      'mail-account', 'create', '--team', teamId,
      '--smtp-url', `smtp://cli%20user%40example.com:p%40ss%3Aword%2F1@127.0.0.1:${smtp.port}`,
      '--security', 'none', '--from-email', 'a@example.com', '--verify', '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(smtp.logins.slice(seen), [{ username: 'cli user@example.com', password: 'p@ss:word/1', accepted: true }]);
    assert.equal(await count(teamId), 1);
  });

  test('--verify with a wrong password exits 1 saying the login was refused, and saves nothing', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const r = await plover(t.database.url, [
      'mail-account', 'create', '--team', teamId,
      '--smtp-url', `smtp://cli%20user%40example.com:wrong@127.0.0.1:${smtp.port}`,
      '--security', 'none', '--from-email', 'a@example.com', '--verify',
    ]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^plover: .*--verify: SMTP login check failed: login refused/);
    assert.equal(r.stdout, '');
    assert.equal(await count(teamId), 0);
  });

  test('clear messages and exit 2 (usage) on bad input, 1 when the team does not exist', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const base = ['mail-account', 'create', '--team', teamId, '--from-email', 'a@example.com'];
    const cases: [string[], RegExp][] = [
      [[...base, '--smtp-url', 'http://x.example.com'], /--smtp-url must look like smtp:\/\/.*got http:/],
      [[...base, '--smtp-url', 'not a url'], /--smtp-url must look like/],
      [[...base, '--smtp-url', 'smtp://x.example.com:99999'], /--smtp-url must look like/],
      [[...base, '--smtp-url', 'smtp://x.example.com/path'], /no path, query or fragment/],
      [[...base, '--smtp-url', 'smtp://u:%E0%A4%A@x.example.com'], /password is not valid URL encoding/],
      [[...base, '--smtp-url', 'smtps://x.example.com', '--security', 'none'], /contradicts smtps:\/\//],
      [[...base, '--smtp-url', 'smtp://x.example.com', '--security', 'tls'], /use an smtps:\/\/ URL/],
      [[...base, '--smtp-url', 'smtp://x.example.com', '--security', 'ssl'], /--security must be tls, starttls or none/],
      [[...base, '--smtp-url', 'smtp://x.example.com', '--daily-limit', 'lots'], /--daily-limit must be a whole number/],
      [[...base, '--smtp-url', 'smtp://x.example.com', '--daily-limit', '0'], /--daily-limit must be >= 1/],
      [[...base, '--smtp-url', 'smtp://u@x.example.com'], /--smtp-url password is required with a username/],
      [[...base, '--smtp-url', 'smtp://x.example.com:0'], /--smtp-url port must be >= 1/],
      [['mail-account', 'create', '--team', teamId, '--smtp-url', 'smtp://x.example.com', '--from-email', 'nope'], /--from-email must match format "email"/],
      [['mail-account', 'create', '--team', 'abc', '--smtp-url', 'smtp://x.example.com', '--from-email', 'a@example.com'], /--team must be a UUID/],
      [['mail-account', 'create', '--team', '00000000-0000-4000-8000-000000000000', '--smtp-url', 'smtp://x.example.com', '--from-email', 'a@example.com'], /no team with id/],
      [['mail-account', 'create', '--team', teamId, '--from-email', 'a@example.com'], /required option '--smtp-url/],
    ];
    const runs = await Promise.all(cases.map(([args]) => plover(t.database.url, args)));
    for (const [i, [args, message]] of cases.entries()) {
      const code = /no team with id/.test(String(message)) ? 1 : 2;
      assert.equal(runs[i].code, code, `${args.join(' ')} exits ${code}: ${runs[i].stderr}`);
      assert.match(runs[i].stderr, message, `${args.join(' ')}: ${runs[i].stderr}`);
    }
    assert.equal(await count(teamId), 0);
  });

  test('parseSmtpUrl: IPv6 hosts lose their brackets', () => {
    assert.deepEqual(parseSmtpUrl('smtps://a:b@[::1]:2465'), { host: '::1', port: 2465, security: 'tls', username: 'a', password: 'b' });
  });
});
