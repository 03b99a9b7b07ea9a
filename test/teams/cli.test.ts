import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers.ts';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');

type Run = { code: number; stdout: string; stderr: string };

function plover(url: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...process.env, DATABASE_URL: url } }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('plover CLI, end to end', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp({ deps: { keyCacheTtlMs: 100 } });
  });
  after(() => t.close());
  const ping = (key: string) => t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } });

  test('team create --json prints exactly one JSON object whose key works', async () => {
    const r = await plover(t.database.url, ['team', 'create', 'Acme', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    assert.equal(lines.length, 1);
    const out = JSON.parse(lines[0]);
    assert.deepEqual(Object.keys(out).sort(), ['api_key', 'team_id']);
    assert.match(out.team_id, /^[0-9a-f-]{36}$/);
    assert.match(out.api_key, /^plv_live_/);
    assert.equal((await ping(out.api_key)).statusCode, 200);
  });

  test('key create, key list and key revoke', async () => {
    const team = JSON.parse((await plover(t.database.url, ['team', 'create', 'Keys Inc', '--json'])).stdout);
    const created = await plover(t.database.url, ['key', 'create', '--team', team.team_id, '--name', 'zapier', '--json']);
    assert.equal(created.code, 0, created.stderr);
    const key = JSON.parse(created.stdout);
    assert.equal(key.name, 'zapier');
    assert.equal((await ping(key.api_key)).statusCode, 200);

    const list = await plover(t.database.url, ['key', 'list', '--team', team.team_id, '--json']);
    assert.equal(list.code, 0, list.stderr);
    const keys = JSON.parse(list.stdout).keys;
    assert.deepEqual(keys.map((k: { name: string }) => k.name).sort(), ['default', 'zapier']);
    assert.ok(!list.stdout.includes(key.api_key), 'the list never shows a key');
    const listed = keys.find((k: { id: string }) => k.id === key.key_id);
    assert.ok(key.api_key.startsWith(listed.prefix));
    assert.equal(listed.revoked_at, null);

    const text = await plover(t.database.url, ['key', 'list', '--team', team.team_id]);
    assert.match(text.stdout, /zapier/);

    const revoke = await plover(t.database.url, ['key', 'revoke', key.key_id]);
    assert.equal(revoke.code, 0, revoke.stderr);
    assert.match(revoke.stdout, /revoked/);
    await new Promise((r) => setTimeout(r, 150));
    assert.equal((await ping(key.api_key)).statusCode, 401);

    const again = await plover(t.database.url, ['key', 'revoke', key.key_id]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /no live key/);
  });

  test('migrate reports an up-to-date database', async () => {
    const r = await plover(t.database.url, ['migrate']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /up to date/);
  });

  test('clear messages and non-zero exits on errors', async () => {
    const cases: [string[], RegExp][] = [
      [['key', 'create', '--team', 'nope', '--name', 'x'], /--team must be a UUID/],
      [['key', 'create', '--team', '00000000-0000-4000-8000-000000000000', '--name', 'x'], /no team with id/],
      [['key', 'list', '--team', '00000000-0000-4000-8000-000000000000'], /no team with id/],
      [['key', 'revoke', 'abc'], /key id must be a UUID/],
      [['team', 'create', '   '], /team name must be/],
      [['key', 'create', '--name', 'x'], /required option '--team/],
      [['frobnicate'], /unknown command/],
    ];
    for (const [args, message] of cases) {
      const r = await plover(t.database.url, args);
      assert.notEqual(r.code, 0, `${args.join(' ')} exits non-zero`);
      assert.match(r.stderr, message, `${args.join(' ')}: ${r.stderr}`);
    }
  });

  test('a bad configuration is reported naming the variable', async () => {
    const r = await new Promise<Run>((resolve) => {
      execFile(process.execPath, [CLI, 'migrate'], { env: { ...process.env, DATABASE_URL: 'mysql://nope' } }, (err, stdout, stderr) =>
        resolve({ code: err ? 1 : 0, stdout, stderr }),
      );
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /DATABASE_URL/);
  });
});
