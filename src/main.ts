// Process lifecycle shared by the entry points: config, database, migrations,
// API and/or worker, first-start welcome, and graceful shutdown.
import closeWithGrace from 'close-with-grace';
import { Redis } from 'ioredis';
import pino from 'pino';
import { buildApp } from './app.ts';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { migrate } from './db/migrate.ts';
import { describeAllowList } from './lib/net-guard.ts';
import { openDatabase } from './db/open.ts';
import { countTeams, createApiKey, createTeam } from './teams/queries.ts';
import { createPasswordToken } from './dashboard/users.ts';
import { startWorker } from './background.ts';
import { startInboundListener } from './inbound/listener.ts';
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

export async function main(opts: { api: boolean; worker: boolean | undefined }): Promise<void> {
  const config = configOrExit();
  const log = pino({ level: config.logLevel });
  // Which private addresses webhooks and SMTP hosts may reach: an operator must see it at start.
  log.info({ allowed_private_targets: config.allowedPrivateTargets }, describeAllowList(config.allowedPrivateTargets, config.allowedPrivateTargetsSource));
  const database = await openDatabase(config, (msg) => log.info(msg));
  const applied = await migrate(database.pool);
  if (applied.length) log.info({ applied }, 'migrations applied');

  const redis = config.redisUrl
    ? new Redis(config.redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 2_000 })
    : undefined;
  redis?.on('error', (err) => log.warn({ err: err.message }, 'redis error'));

  const runtimeConfig = { ...config, appSecret: database.appSecret };
  const app = opts.api
    ? await buildApp({ config: runtimeConfig, pool: database.pool, db: database.db, redis, logger: log })
    : undefined;
  const runWorker = opts.worker ?? config.runWorker;
  const worker = runWorker
    ? await startWorker(database.pool, { db: database.db, config: runtimeConfig }, log.child({ component: 'worker' }))
    : undefined;
  // The inbound SMTP listener runs with the worker (docs/operations.md): one process per INBOUND_SMTP_PORT.
  const inbound = runWorker && config.inbound.smtpPort !== undefined
    ? await startInboundListener({ db: database.db, config: runtimeConfig, log: log.child({ component: 'inbound' }) })
    : undefined;

  closeWithGrace({ delay: 15_000 }, async ({ signal, err }) => {
    if (err) log.error({ err }, 'fatal error, shutting down');
    else log.info({ signal }, 'shutting down');
    const t0 = Date.now();
    await app?.close(); // stops accepting, lets in-flight requests finish
    const t1 = Date.now();
    await inbound?.close(); // answers the sessions in flight, then stops
    await worker?.stop(); // lets running jobs finish
    const t2 = Date.now();
    await closeUntrustedPool();
    redis?.disconnect();
    await database.close(); // stops the embedded PostgreSQL when we started it
    log.info({ api_ms: t1 - t0, worker_ms: t2 - t1, database_ms: Date.now() - t2 }, 'stopped');
  });

  if (app) {
    await app.listen({ port: config.port, host: config.host });
    if (database.embedded) await welcomeOnFirstStart(database.db, config);
  }
}

async function welcomeOnFirstStart(db: Parameters<typeof countTeams>[0], config: Config): Promise<void> {
  if ((await countTeams(db)) > 0) return;
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
}
