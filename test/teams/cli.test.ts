import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { buildCli } from '../../src/cli.ts';
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

  test('exit codes: 2 for a wrong command line, 1 for a failed operation', async () => {
    const cases: [string[], number, RegExp][] = [
      [['key', 'create', '--team', 'nope', '--name', 'x'], 2, /--team must be a UUID/],
      [['key', 'create', '--team', '00000000-0000-4000-8000-000000000000', '--name', 'x'], 1, /no team with id/],
      [['key', 'list', '--team', '00000000-0000-4000-8000-000000000000'], 1, /no team with id/],
      [['key', 'revoke', 'abc'], 2, /key id must be a UUID/],
      [['team', 'create', '   '], 2, /team name must be/],
      [['key', 'create', '--name', 'x'], 2, /required option '--team/],
      [['key', 'list', '--team', '00000000-0000-4000-8000-000000000000', '--frob'], 2, /unknown option '--frob'/],
      [['frobnicate'], 2, /unknown command/],
      [[], 2, /Usage: plover/],
    ];
    const runs = await Promise.all(cases.map(([args]) => plover(t.database.url, args)));
    for (const [i, [args, code, message]] of cases.entries()) {
      assert.equal(runs[i].code, code, `${args.join(' ')}: ${runs[i].stderr}`);
      assert.match(runs[i].stderr, message, `${args.join(' ')}: ${runs[i].stderr}`);
    }
  });

  test('team list shows every team with its keys and users; team rename changes the name recipients read', async () => {
    const made = JSON.parse((await plover(t.database.url, ['team', 'create', 'Listed Ltd', '--json'])).stdout);
    const list = await plover(t.database.url, ['team', 'list', '--json']);
    assert.equal(list.code, 0, list.stderr);
    const lines = list.stdout.trim().split('\n');
    assert.equal(lines.length, 1);
    const row = JSON.parse(lines[0]).teams.find((x: { id: string }) => x.id === made.team_id);
    assert.deepEqual({ ...row, created_at: typeof row.created_at }, { id: made.team_id, name: 'Listed Ltd', created_at: 'string', api_keys: 1, users: 0 });
    const text = await plover(t.database.url, ['team', 'list']);
    assert.match(text.stdout, new RegExp(`${made.team_id}  Listed Ltd  \\(1 live key, 0 users`));

    const renamed = await plover(t.database.url, ['team', 'rename', made.team_id, '  Listed & Co  ', '--json']);
    assert.equal(renamed.code, 0, renamed.stderr);
    assert.deepEqual(JSON.parse(renamed.stdout), { team_id: made.team_id, name: 'Listed & Co' });
    const stored = await t.database.db.selectFrom('teams').select('name').where('id', '=', made.team_id).executeTakeFirstOrThrow();
    assert.equal(stored.name, 'Listed & Co');
    assert.match((await plover(t.database.url, ['team', 'rename', made.team_id, 'Plain'])).stdout, /renamed to Plain/);
  });

  test('team rename: an unknown team is exit 1, a bad id or name exit 2, and nothing changes', async () => {
    const made = JSON.parse((await plover(t.database.url, ['team', 'create', 'Unchanged', '--json'])).stdout);
    const missing = await plover(t.database.url, ['team', 'rename', '00000000-0000-4000-8000-000000000000', 'X']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no team with id/);
    const badId = await plover(t.database.url, ['team', 'rename', 'nope', 'X']);
    assert.equal(badId.code, 2);
    for (const name of ['   ', 'x'.repeat(201), 'a\nb']) {
      const r = await plover(t.database.url, ['team', 'rename', made.team_id, name]);
      assert.equal(r.code, 2, name);
      assert.match(r.stderr, /the team name must/);
    }
    const stored = await t.database.db.selectFrom('teams').select('name').where('id', '=', made.team_id).executeTakeFirstOrThrow();
    assert.equal(stored.name, 'Unchanged');
  });

  test('--version prints the package version and exits 0; --help exits 0', async () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'package.json'), 'utf8'));
    const v = await plover(t.database.url, ['--version']);
    assert.equal(v.code, 0, v.stderr);
    assert.equal(v.stdout.trim(), pkg.version);
    const h = await plover(t.database.url, ['key', 'list', '--help']);
    assert.equal(h.code, 0);
    assert.match(h.stdout, /--json/);
  });

  test('every command that prints a result takes --json', async () => {
    // dev-smtp is a server and export writes CSV: their output is the data itself.
    const own = new Set(['dev-smtp', 'contacts export']);
    const leaves = (c: Command, prefix: string): [string, Command][] =>
      c.commands.length ? c.commands.flatMap((s) => leaves(s, `${prefix}${s.name()} `)) : [[prefix.trim(), c]];
    const all = leaves(buildCli(), '').filter(([path]) => !own.has(path));
    assert.ok(all.length >= 9, all.map(([p]) => p).join(', '));
    for (const [path, cmd] of all) assert.ok(cmd.options.some((o) => o.long === '--json'), `${path} has --json`);
  });

  test('a bad configuration is reported naming the variable', async () => {
    const r = await new Promise<Run>((resolve) => {
      execFile(process.execPath, [CLI, 'migrate'], { env: { ...process.env, DATABASE_URL: 'mysql://nope' } }, (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
    assert.equal(r.code, 2, 'a configuration error is a usage error, as for the server');
    assert.match(r.stderr, /DATABASE_URL/);
  });
});
