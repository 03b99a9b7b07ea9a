// Runs the README's walk-throughs as written, so the README cannot drift from
// the code: every ```sh block marked with <!-- readme-walkthrough --> is run,
// in order, in one `bash -euo pipefail` in a fresh clone of the repository
// (`git clone` of this checkout's committed HEAD into a temporary directory:
// what is not committed is not there, as for a newcomer), against a fresh server (an empty DATA_DIR: the embedded database and the first-start
// team, exactly what a newcomer gets). Only two things are swapped, so runs do
// not collide with a server already on the machine: the API port (3000) and the
// dev SMTP sink's port (2525), for free ones. Everything listens on 127.0.0.1.
// The shell's background jobs (the server, the sink) are stopped at the end.
// The clone reuses this checkout's node_modules (a symlink), so no network is
// needed and `npm install` is not timed here.
//
//   npm run readme [-- --keep]      (--keep: leave the data directory for a look)
//
// Exit 0 when every command succeeded and the answers the README promises
// came; 1 otherwise, with the whole output.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

const root = join(import.meta.dirname, '..');
const MARK = '<!-- readme-walkthrough -->';

/** The marked shell blocks of a README, in order. */
export function walkthroughBlocks(readme: string): string[] {
  const blocks: string[] = [];
  const re = new RegExp(`${MARK}\\s*\\n\`\`\`sh\\n([\\s\\S]*?)\\n\`\`\``, 'g');
  for (const m of readme.matchAll(re)) blocks.push(m[1]!);
  return blocks;
}

/** What the walk-throughs' output must hold: the answers the README's comments promise. */
export const PROMISES: [string, RegExp][] = [
  ['the ping with the printed key', /\{"ok":true\}/],
  ['the ping without a key', /"code":"UNAUTHORIZED"/],
  ['the renamed team', /renamed to Acme Newsletter/],
  ['the revoked key', /key [0-9a-f-]{36} revoked/],
  ['a webhook on loopback, allowed on a local trial, and its signing key', /whsec_[A-Za-z0-9+/=]{40,}/],
  ['the e-mail in the sink, its subject decoded', /subject: Welcome, Grace 👋/],
  ['the decision of the second event', /\{"decision":"skip","reason":"cooldown"\}/],
  ['stop and start with the JSON helper and no body', /^"paused"\n"active"$/m],
];

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Clones this checkout's committed HEAD into `dir`/plover (objects shared, not
 * copied: `--shared`) and links its node_modules; answers the clone's path.
 */
export function freshClone(dir: string): string {
  const head = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  const checkout = join(dir, 'plover');
  const git = (args: string[], cwd?: string) => execFileSync('git', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
  git(['clone', '--quiet', '--shared', '--no-checkout', root, checkout]);
  git(['-c', 'advice.detachedHead=false', 'checkout', '--quiet', '--detach', head], checkout);
  symlinkSync(join(root, 'node_modules'), join(checkout, 'node_modules'), 'dir');
  return checkout;
}

export type WalkthroughResult = { ok: boolean; code: number | null; output: string; missing: string[]; blocks: number; ms: number };

export async function runWalkthroughs(opts: { keep?: boolean; timeoutMs?: number; log?: (line: string) => void } = {}): Promise<WalkthroughResult> {
  const started = Date.now();
  const cloneDir = mkdtempSync(join(tmpdir(), 'plover-readme-clone-'));
  const checkout = freshClone(cloneDir);
  const blocks = walkthroughBlocks(readFileSync(join(checkout, 'README.md'), 'utf8'));
  if (blocks.length === 0) throw new Error(`no ${MARK} blocks in README.md`);
  const [apiPort, smtpPort] = [await freePort(), await freePort()];
  const dataDir = mkdtempSync(join(tmpdir(), 'plover-readme-'));
  const script = [
    'set -euo pipefail',
    'rm -f plover.log smtp.log',
    ...blocks.map((b, i) => `echo "### block ${i + 1}"\n${b}`),
    'echo "### done"',
  ]
    .join('\n')
    .replaceAll('localhost:3000', `localhost:${apiPort}`)
    .replace(/\b2525\b/g, String(smtpPort));
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: String(apiPort) };
  // A newcomer's shell: no database, secret, log settings or private targets of a test run.
  for (const name of ['DATABASE_URL', 'APP_SECRET', 'PUBLIC_URL', 'LOG_LEVEL', 'LOG_FORMAT', 'ALLOWED_PRIVATE_TARGETS', 'WEBHOOK_ALLOWED_TARGETS', 'REDIS_URL']) delete env[name];
  // Its own process group, so the walk-through's background jobs can be stopped with it.
  const child = spawn('bash', ['-c', script], { cwd: checkout, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const take = (c: Buffer) => {
    output += c.toString();
    for (const line of c.toString().split('\n')) if (line.startsWith('### ')) opts.log?.(line);
  };
  child.stdout.on('data', take);
  child.stderr.on('data', take);
  const timeoutMs = opts.timeoutMs ?? 600_000;
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    process.kill(-child.pid!, 'SIGTERM');
  }, timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  // The server and the sink still run in the group: a graceful stop first (the
  // server stops its embedded PostgreSQL), then a hard one.
  const alive = () => {
    try {
      process.kill(-child.pid!, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (alive()) process.kill(-child.pid!, 'SIGTERM');
  for (let i = 0; i < 150 && alive(); i++) await sleep(100);
  if (alive()) process.kill(-child.pid!, 'SIGKILL');
  try {
    output += `\n--- plover.log ---\n${readFileSync(join(checkout, 'plover.log'), 'utf8')}\n--- smtp.log ---\n${readFileSync(join(checkout, 'smtp.log'), 'utf8')}`;
  } catch {
    // a block failed before it wrote them
  }
  if (!opts.keep) {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(cloneDir, { recursive: true, force: true });
  } else opts.log?.(`### kept ${checkout} and ${dataDir}`);
  const missing = PROMISES.filter(([, re]) => !re.test(output)).map(([what]) => what);
  if (timedOut) missing.unshift(`the walk-throughs did not finish within ${timeoutMs / 1000} s`);
  return { ok: code === 0 && missing.length === 0 && /### done/.test(output), code, output, missing, blocks: blocks.length, ms: Date.now() - started };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { keep: { type: 'boolean', default: false } } });
  const result = await runWalkthroughs({ keep: values.keep, log: (line) => console.error(line) });
  if (!result.ok) {
    console.error(result.output);
    console.error(`\nREADME walk-throughs FAILED (exit ${result.code}); missing: ${result.missing.join('; ') || 'none'}`);
    process.exit(1);
  }
  console.log(`README walk-throughs: ${result.blocks} blocks ran as written in ${(result.ms / 1000).toFixed(0)} s`);
}
