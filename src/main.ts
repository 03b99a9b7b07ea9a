// Process lifecycle shared by the entry points: config, database, migrations,
// API and/or worker, first-start welcome, the start banner, and graceful shutdown.
import { createServer } from 'node:net';
import closeWithGrace from 'close-with-grace';
import { connectRedis } from './lib/redis.ts';
import pino from 'pino';
import prettyStream from 'pino-pretty';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { migrate } from './db/migrate.ts';
import { describeAllowList } from './lib/net-guard.ts';
import { openDatabase } from './db/open.ts';
import type { Db } from './db/pool.ts';
import { countTeams, createApiKey, createTeam, listTeams } from './teams/queries.ts';
import { createPasswordToken } from './dashboard/users.ts';
import { startWorker } from './background.ts';
import { closeUntrustedPool } from './untrusted/pool.ts';

function configOrExit(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`plover: configuration error: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
}

/**
 * Readable lines on a terminal (pino-pretty, in this thread: a person reads
 * them as they come), one JSON object a line otherwise (collectors parse them).
 */
export function makeLogger(config: Pick<Config, 'logLevel' | 'logFormat'>, stream: NodeJS.WritableStream & { isTTY?: boolean } = process.stdout): pino.Logger {
  const pretty = config.logFormat === 'pretty' || (config.logFormat === 'auto' && stream.isTTY === true);
  if (!pretty) return pino({ level: config.logLevel });
  return pino(
    { level: config.logLevel },
    prettyStream({ colorize: stream.isTTY === true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true, destination: stream }),
  );
}

/** The one-line message for a port another process holds, without a stack trace. */
export function portInUseMessage(port: number): string {
  return `plover: port ${port} is in use: set PORT or stop the other process`;
}

/** Resolves when `host`:`port` can be listened on; rejects with EADDRINUSE (or another listen error) when not. */
function probePort(port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve()));
  });
}

const isPortInUse = (err: unknown) => (err as { code?: string } | undefined)?.code === 'EADDRINUSE';

export async function main(opts: { api: boolean; worker: boolean | undefined }): Promise<void> {
  const config = configOrExit();
  const log = makeLogger(config);
  // Before the database and the worker start: a second `npm start` stops here
  // with one line, and touches nothing the first one runs. (Port 0 picks a free one.)
  if (opts.api && config.port !== 0) {
    await probePort(config.port, config.host).catch((err: unknown) => {
      if (!isPortInUse(err)) throw err;
      process.stderr.write(portInUseMessage(config.port) + '\n');
      process.exit(1);
    });
  }
  const database = await openDatabase(config, (msg) => log.info(msg));
  const applied = await migrate(database.pool);
  if (applied.length) log.info({ applied }, 'migrations applied');

  const redis = config.redisUrl ? connectRedis(config.redisUrl, (err) => log.warn({ err: err.message }, 'redis error')) : undefined;

  const runtimeConfig = { ...config, appSecret: database.appSecret };
  // The API and the inbound listener are loaded only by a process that runs
  // them: a worker process (`npm run worker`) does not hold Fastify, the
  // dashboard, Swagger and smtp-server's modules (their source and compiled
  // code stay in the heap once loaded).
  const app = opts.api
    ? await (await import('./app.ts')).buildApp({ config: runtimeConfig, pool: database.pool, db: database.db, redis, logger: log })
    : undefined;
  const runWorker = opts.worker ?? config.runWorker;
  const worker = runWorker
    ? await startWorker(database.pool, { db: database.db, config: runtimeConfig }, log.child({ component: 'worker' }))
    : undefined;
  // The inbound SMTP listener runs with the worker (docs/operations.md): one process per INBOUND_SMTP_PORT.
  const inbound = runWorker && config.inbound.smtpPort !== undefined
    ? await (await import('./inbound/listener.ts')).startInboundListener({ db: database.db, config: runtimeConfig, log: log.child({ component: 'inbound' }) })
    : undefined;

  const stopAll = async () => {
    const t0 = Date.now();
    await app?.close(); // stops accepting, lets in-flight requests finish
    const t1 = Date.now();
    await inbound?.close(); // answers the sessions in flight, then stops
    await worker?.stop(); // lets running jobs finish
    const t2 = Date.now();
    await closeUntrustedPool();
    redis?.disconnect();
    await database.close(); // stops the embedded PostgreSQL when we started it
    return { api_ms: t1 - t0, worker_ms: t2 - t1, database_ms: Date.now() - t2 };
  };
  const graceful = closeWithGrace({ delay: 15_000 }, async ({ signal, err }) => {
    if (err) log.error({ err }, 'fatal error, shutting down');
    else log.info({ signal }, 'shutting down');
    log.info(await stopAll(), 'stopped');
  });

  if (app) {
    // The first team and its key are made and printed before the port opens: a
    // script that waits for /healthz and then reads the key from the log (the
    // README's walk-through does) must find it there. Listening first let a
    // loaded machine answer /healthz while the key was not yet written.
    const welcome = database.embedded ? await welcomeOnFirstStart(database.db, config) : undefined;
    try {
      await app.listen({ port: config.port, host: config.host });
    } catch (err) {
      // Taken between the probe and now: the same one line, after a clean stop.
      if (!isPortInUse(err)) throw err;
      process.stderr.write(portInUseMessage(config.port) + '\n');
      graceful.uninstall();
      await stopAll();
      process.exit(1);
    }
    await startBanner(database.db, config, { embedded: database.embedded, worker: !!worker, welcomed: welcome !== undefined }, log);
  } else {
    log.info({ allowed_private_targets: config.allowedPrivateTargets }, describeAllowList(config.allowedPrivateTargets, config.allowedPrivateTargetsSource));
  }
}

/** The first start on the embedded database makes a team, its first key and a password link. */
async function welcomeOnFirstStart(db: Db, config: Config): Promise<string | undefined> {
  if ((await countTeams(db)) > 0) return undefined;
  const team = await createTeam(db, 'My team');
  const { key } = await createApiKey(db, team.id, 'first key');
  const passwordToken = await createPasswordToken(db, team.id, null);
  const base = config.publicUrl;
  process.stdout.write(
    [
      '',
      '  Welcome to Plover. A first team was created for you.',
      `  Team id:  ${team.id}`,
      `  API key:  ${key}`,
      '  The key is shown only this once: keep it like a password.',
      '',
      `  Try it:   curl -H "x-api-key: ${key}" ${base}/public/v1/ping`,
      `  API docs: ${base}/docs`,
      '',
      `  Dashboard: open ${base}/set-password?token=${passwordToken}`,
      '  to choose your e-mail and password (the link works once, for 7 days),',
      `  then sign in at ${base}/sign-in`,
      '',
    ].join('\n') + '\n',
  );
  return team.id;
}

export type BannerFacts = {
  publicUrl: string;
  teams: { id: string; name: string; users: number }[];
  teamCount: number;
  privateTargets: string;
  worker: boolean;
  embedded: boolean;
};

/** The start banner's lines: where things are, which team, how to sign in, which private targets are allowed. */
export function bannerLines(f: BannerFacts): string[] {
  const base = f.publicUrl;
  const lines = [
    `  Plover is ready${f.worker ? ' (API and worker)' : ''}${f.embedded ? ', on the embedded database' : ''}.`,
    `  API:        ${base}/public/v1   (send the key in x-api-key)`,
    `  API docs:   ${base}/docs`,
    `  Dashboard:  ${base}/`,
  ];
  const first = f.teams[0];
  if (!first) {
    lines.push('  Teams:      none yet: npx plover team create "My team"');
  } else if (f.teamCount === 1) {
    lines.push(`  Team:       ${first.name} (id ${first.id})`);
  } else {
    lines.push(`  Teams:      ${f.teamCount}, the first ${first.name} (id ${first.id}); all: npx plover team list`);
  }
  if (first) {
    lines.push(
      first.users === 0
        ? `  Sign in:    npx plover user create --team ${first.id} --email you@example.com   (prints a one-time link)`
        : `  Sign in:    ${base}/sign-in   (a forgotten password: npx plover user password-link --email <address>)`,
    );
  }
  lines.push(`  Private:    ${f.privateTargets}`);
  return lines;
}

/**
 * On every start: a text banner on a terminal; one `ready` log line with the
 * same facts otherwise, so a log collector gets JSON only.
 */
async function startBanner(db: Db, config: Config, state: { embedded: boolean; worker: boolean; welcomed: boolean }, log: pino.Logger): Promise<void> {
  const teams = await listTeams(db, 3);
  const teamCount = teams.length < 3 ? teams.length : await countTeams(db);
  const privateTargets = describeAllowList(config.allowedPrivateTargets, config.allowedPrivateTargetsSource);
  const facts: BannerFacts = { publicUrl: config.publicUrl, teams, teamCount, privateTargets, worker: state.worker, embedded: state.embedded };
  if (config.logFormat === 'json' || (config.logFormat === 'auto' && !process.stdout.isTTY)) {
    log.info(
      {
        api_url: `${config.publicUrl}/public/v1`, docs_url: `${config.publicUrl}/docs`, dashboard_url: `${config.publicUrl}/`,
        team_id: teams[0]?.id ?? null, teams: teamCount, allowed_private_targets: config.allowedPrivateTargets,
      },
      `ready: ${privateTargets}`,
    );
    return;
  }
  process.stdout.write(['', ...bannerLines(facts), ''].join('\n') + '\n');
}
