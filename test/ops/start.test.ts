// `npm start` as a newcomer meets it: the banner on every start (URLs, team,
// how to sign in, which private targets are allowed), readable logs on a
// terminal and JSON otherwise, no crontab message from the job runner, and a
// one-line error when the port is taken.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { bannerLines, portInUseMessage } from '../../src/main.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';
import { freePort } from '../faults/processes.ts';

const root = join(import.meta.dirname, '..', '..');

type Proc = { child: ChildProcess; out: () => string; err: () => string; exited: Promise<number | null> };

function server(env: NodeJS.ProcessEnv): Proc {
  const child = spawn(process.execPath, ['src/server.ts'], { cwd: root, env: { ...process.env, HOST: '127.0.0.1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, out: () => out, err: () => err, exited };
}

async function until(what: string, p: Proc, ok: () => boolean, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (p.child.exitCode !== null) throw new Error(`${what}: the server exited (${p.child.exitCode}): ${p.out()} ${p.err()}`);
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms: ${p.out()} ${p.err()}`);
    await sleep(50);
  }
}

async function stop(p: Proc): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill('SIGTERM');
  await p.exited;
}

describe('start: banner, logs, busy port', () => {
  let database: TestDatabase;
  let teamId: string;
  const running: Proc[] = [];
  before(async () => {
    database = await createTestDatabase();
    ({ teamId } = await makeTeam(database.db, 'Banner team'));
  });
  after(async () => {
    for (const p of running) await stop(p);
    await database?.drop();
  });

  test('on a terminal-style (pretty) log: the banner names the URLs, the team, sign-in and private targets; no crontab message at trace level', async () => {
    const port = await freePort();
    const p = server({ DATABASE_URL: database.url, PORT: String(port), LOG_LEVEL: 'trace', LOG_FORMAT: 'pretty', PUBLIC_URL: `http://localhost:${port}` });
    running.push(p);
    await until('banner', p, () => /Private: /.test(p.out()));
    // Let the job runner's start-up (and its cron set-up) log what it logs.
    await until('worker', p, () => /Worker connected/.test(p.out()));
    await sleep(1_000);
    const out = p.out();
    assert.match(out, new RegExp(`API: +http://localhost:${port}/public/v1`));
    assert.match(out, new RegExp(`API docs: +http://localhost:${port}/docs`));
    assert.match(out, new RegExp(`Dashboard: +http://localhost:${port}/`));
    assert.match(out, new RegExp(`Team: +Banner team \\(id ${teamId}\\)`));
    assert.match(out, new RegExp(`npx plover user create --team ${teamId}`), 'no user yet: how to make one');
    assert.match(out, /Private: +ALLOWED_PRIVATE_TARGETS: 127\.0\.0\.0\/8, ::1, localhost \(default for a loopback PUBLIC_URL\)/);
    // Readable lines, not JSON objects.
    assert.match(out, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: Server listening at http:\/\/127\.0\.0\.1:\d+/m);
    assert.doesNotMatch(out, /^\{"level"/m);
    assert.doesNotMatch(out + p.err(), /crontab/i);
    assert.equal(p.err(), '');

    // A second start on the same port: one line on stderr, exit 1, no stack trace, the first one unharmed.
    const second = server({ DATABASE_URL: database.url, PORT: String(port), LOG_FORMAT: 'json' });
    const code = await second.exited;
    assert.equal(code, 1);
    assert.equal(second.err(), `${portInUseMessage(port)}\n`);
    assert.equal(second.err().trim().split('\n').length, 1);
    assert.doesNotMatch(second.out() + second.err(), /at .*\.ts:\d+|Error:|EADDRINUSE/);
    assert.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200);
    await stop(p);
  });

  test('not a terminal: every stdout line is JSON and the banner is one `ready` line with the same facts', async () => {
    const port = await freePort();
    const p = server({ DATABASE_URL: database.url, PORT: String(port), LOG_LEVEL: 'info', RUN_WORKER: 'false', PUBLIC_URL: 'https://mail.example.com' });
    running.push(p);
    await until('ready line', p, () => /"msg":"ready: /.test(p.out()));
    await stop(p);
    const lines = p.out().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    const ready = lines.find((l) => String(l.msg).startsWith('ready: '))!;
    assert.equal(ready.api_url, 'https://mail.example.com/public/v1');
    assert.equal(ready.dashboard_url, 'https://mail.example.com/');
    assert.equal(ready.docs_url, 'https://mail.example.com/docs');
    assert.equal(ready.team_id, teamId);
    assert.deepEqual(ready.allowed_private_targets, []);
    assert.match(String(ready.msg), /ALLOWED_PRIVATE_TARGETS: none \(only public addresses; default\)/);
  });

  test('banner lines: several teams point to team list; a team with users gets the sign-in URL', () => {
    const lines = bannerLines({
      publicUrl: 'http://localhost:3000', teamCount: 4, privateTargets: 'ALLOWED_PRIVATE_TARGETS: none', worker: true, embedded: true,
      teams: [{ id: 't1', name: 'First', users: 2 }],
    }).join('\n');
    assert.match(lines, /Teams: +4, the first First \(id t1\); all: npx plover team list/);
    assert.match(lines, /Sign in: +http:\/\/localhost:3000\/sign-in +\(a forgotten password: npx plover user password-link --email <address>\)/);
    assert.match(bannerLines({ publicUrl: 'x', teamCount: 0, privateTargets: 'p', worker: false, embedded: false, teams: [] }).join('\n'), /npx plover team create/);
  });
});
