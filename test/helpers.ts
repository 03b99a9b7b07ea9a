// Test helpers: every test file gets its own fresh, migrated database on the
// PostgreSQL in DATABASE_URL (set by scripts/test.ts), and every test makes its
// own team, so no test depends on another's rows.
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import pg from 'pg';
import { buildApp, type AppDeps } from '../src/app.ts';
import { loadConfig, type Config } from '../src/config.ts';
import { migrate } from '../src/db/migrate.ts';
import { LOOPBACK_TARGETS } from '../src/lib/net-guard.ts';
import { createDb, createPool, type Db } from '../src/db/pool.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';

export function baseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run the tests with `npm test`');
  return url;
}

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

export type TestDatabase = { url: string; name: string; pool: pg.Pool; db: Db; drop(): Promise<void> };

/** A new database, migrated, dropped by drop(). */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `plover_t_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: baseUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = withDatabase(baseUrl(), name);
  const pool = createPool(url, 10);
  await migrate(pool);
  const db = createDb(pool);
  let dropped = false;
  return {
    url,
    name,
    pool,
    db,
    async drop() {
      if (dropped) return;
      dropped = true;
      await db.destroy();
      if (!pool.ended) await pool.end();
      const c = new pg.Client({ connectionString: baseUrl() });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/**
 * Tests send to SMTP sinks and receivers on 127.0.0.1, so loopback is allowed
 * here explicitly, whatever PUBLIC_URL the environment sets; SSRF tests pass
 * `allowedPrivateTargets: []` to see the production rules.
 */
export function testConfig(overrides: Partial<Config> = {}): Config {
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: baseUrl(), ALLOWED_PRIVATE_TARGETS: LOOPBACK_TARGETS.join(',') };
  delete env.WEBHOOK_ALLOWED_TARGETS;
  return { ...loadConfig(env), ...overrides };
}

/**
 * Tests never ask a DNS server: a host name saved through the API does not
 * resolve unless a test passes its own `resolveHost`. (Connections made by
 * the engine resolve through the system, i.e. /etc/hosts for `localhost`.)
 */
export const noDns = async (host: string): Promise<string[]> => {
  throw Object.assign(new Error(`${host}: no DNS in tests`), { code: 'ENOTFOUND' });
};

/** Nor for TXT records (DKIM activation, the DNS check): every name has none unless a test passes its own `resolveTxt`. */
export const noTxt = async (name: string): Promise<string[][]> => {
  throw Object.assign(new Error(`${name}: no DNS in tests`), { code: 'ENOTFOUND' });
};

export type TestApp = { app: FastifyInstance; database: TestDatabase; close(): Promise<void> };

/** Builds the app on a database (a new one unless given). */
export async function buildTestApp(
  opts: { config?: Partial<Config>; database?: TestDatabase; deps?: Partial<AppDeps>; beforeReady?: (app: FastifyInstance) => void } = {},
): Promise<TestApp> {
  const database = opts.database ?? (await createTestDatabase());
  const app = await buildApp({
    config: testConfig(opts.config), pool: database.pool, db: database.db, resolveHost: noDns, resolveTxt: noTxt, ...opts.deps,
  });
  opts.beforeReady?.(app);
  await app.ready();
  return {
    app,
    database,
    async close() {
      await app.close();
      if (!opts.database) await database.drop();
    },
  };
}

export async function makeTeam(db: Db, name = 'Test team'): Promise<{ teamId: string; key: string; keyId: string }> {
  const team = await createTeam(db, name);
  const { key, info } = await createApiKey(db, team.id, 'test key');
  return { teamId: team.id, key, keyId: info.id };
}

/**
 * A campaign row of the team triggered by `events` and nothing more (no send,
 * so it never sends): the team then has a listener for those events, and
 * emit() leaves them undecided for the decider loop instead of recording them
 * decided.
 */
export async function listeningCampaign(db: Db, teamId: string, events: string[] = ['contact.saved'], deleted = false): Promise<void> {
  await sql`INSERT INTO campaigns (team_id, name, draft_data, trigger_events, deleted_at)
            VALUES (${teamId}::uuid, 'listener', '{}'::jsonb, ${events}::text[], ${deleted ? sql`now()` : null})`.execute(db);
}

/**
 * Polls `fn` every `everyMs` until it gives a truthy value (returned), or
 * throws "timed out waiting for <what>" after `timeoutMs`.
 */
export async function until<T>(what: string, fn: () => Promise<T | undefined | false | null>, timeoutMs = 15_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
