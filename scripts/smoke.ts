// Smoke test of the embedded default, as a newcomer would run it: `npm start`
// with no DATABASE_URL, wait for /readyz, call ping with the printed key, use the
// CLI against the running instance, then SIGTERM and check a clean stop (exit 0,
// embedded PostgreSQL stopped).
import { execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const dataDir = mkdtempSync(join(tmpdir(), 'plover-smoke-'));
const port: number = await new Promise((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => {
    const p = (s.address() as { port: number }).port;
    s.close(() => resolve(p));
  });
});
const base = `http://127.0.0.1:${port}`;
const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' };
delete env.DATABASE_URL;
delete env.APP_SECRET;
delete env.REDIS_URL;

function fail(msg: string): never {
  console.error(`smoke: FAILED: ${msg}`);
  console.error(output);
  server.kill('SIGKILL');
  process.exit(1);
}

function descendantRunning(pid: number, needle: string): number | undefined {
  const rows = execFileSync('ps', ['-eo', 'pid=,ppid=,args='], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.trim().match(/^(\d+)\s+(\d+)\s+(.*)$/))
    .filter((m): m is RegExpMatchArray => m !== null)
    .map((m) => ({ pid: Number(m[1]), ppid: Number(m[2]), args: m[3] }));
  const family = new Set([pid]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const r of rows) {
      if (family.has(r.ppid) && !family.has(r.pid)) {
        family.add(r.pid);
        grew = true;
      }
    }
  }
  return rows.find((r) => family.has(r.pid) && r.args.includes(needle) && !r.args.startsWith('sh '))?.pid;
}

const started = Date.now();
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const server = spawn(npm, ['start'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'], detached: false });
let output = '';
server.stdout.on('data', (c) => (output += c));
server.stderr.on('data', (c) => (output += c));
const exited = new Promise<number | null>((resolve) => server.on('exit', (code) => resolve(code)));

async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 90_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  fail(`timed out waiting for ${what}`);
}

await waitFor('/readyz', async () => (await fetch(`${base}/readyz`).catch(() => null))?.status === 200);
await waitFor('the welcome with the API key', () => /API key:\s+plv_live_/.test(output));
console.log(`smoke: ready in ${Date.now() - started} ms`);
const key = output.match(/API key:\s+(plv_live_[A-Za-z0-9_-]+)/)![1];

const ping = await fetch(`${base}/public/v1/ping`, { headers: { 'x-api-key': key } });
const body = (await ping.json()) as { ok?: unknown };
if (ping.status !== 200 || body.ok !== true) fail(`ping answered ${ping.status} ${JSON.stringify(body)}`);
console.log('smoke: ping with the printed key: 200 {"ok":true}');
const anon = await fetch(`${base}/public/v1/ping`);
if (anon.status !== 401) fail(`ping without a key answered ${anon.status}`);

// The CLI, through the npm bin launcher, finds and uses the running instance.
const cli: { code: number; stdout: string; stderr: string } = await new Promise((resolve) =>
  execFile('npx', ['--no-install', 'plover', 'team', 'create', 'Smoke', '--json'], { cwd: root, env }, (err, stdout, stderr) =>
    resolve({ code: err ? 1 : 0, stdout, stderr }),
  ),
);
if (cli.code !== 0) fail(`plover team create: ${cli.stderr}`);
const created = JSON.parse(cli.stdout.trim());
const ping2 = await fetch(`${base}/public/v1/ping`, { headers: { 'x-api-key': created.api_key } });
if (ping2.status !== 200) fail(`ping with the CLI-made key answered ${ping2.status}`);
console.log('smoke: `npx plover team create` used the running embedded database; its key works');

const docs = await fetch(`${base}/docs/`);
if (docs.status !== 200) fail(`/docs answered ${docs.status}`);

// SIGTERM to the service process itself, as a process manager would send it
// (npm, in between, would forward it a second time).
const serverPid = descendantRunning(server.pid!, 'src/server.ts');
if (!serverPid) fail('could not find the server process under npm');
const stopAt = Date.now();
process.kill(serverPid, 'SIGTERM');
const code = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 30_000))]);
if (code === 'timeout') fail('no exit within 30 s of SIGTERM');
if (code !== 0) fail(`exit code ${code} after SIGTERM`);
await waitFor('embedded PostgreSQL to stop', () => !existsSync(join(dataDir, 'pg', 'postmaster.pid')), 15_000);
console.log(`smoke: SIGTERM: clean exit in ${Date.now() - stopAt} ms, embedded PostgreSQL stopped`);
rmSync(dataDir, { recursive: true, force: true });
console.log('smoke: 1 passed, 0 failed');
process.exit(0);
