// The PostgreSQL the benchmarks run against: DATABASE_URL when set (APP_SECRET
// then required, generated when unset, as for `npm test`), else an embedded
// server in a fresh temporary directory, stopped and removed at the end. Each
// benchmark makes its own migrated database on it, like test/helpers.ts's
// createTestDatabase(), and drops it when done.
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/config.ts';
import { startEmbedded } from '../../src/db/embedded.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createDb, createPool, type Db } from '../../src/db/pool.ts';

export type BenchDatabase = {
  /** Connection string of this database. */
  url: string;
  name: string;
  /** A small pool for setting up data from the benchmark process. */
  pool: pg.Pool;
  db: Db;
  /** The APP_SECRET the app under test must be given. */
  appSecret: string;
  /** Closes the pool and drops the database (idempotent). */
  drop(): Promise<void>;
};

export type BenchPostgres = {
  /** Where it came from: 'DATABASE_URL' or 'embedded'. */
  source: 'DATABASE_URL' | 'embedded';
  appSecret: string;
  /** A new, migrated database. */
  createDatabase(): Promise<BenchDatabase>;
  /** Drops any database still open and stops the embedded server if we started it. */
  close(): Promise<void>;
};

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

/** Settings an embedded server needs for `--pg-stats` (bench/lib/pg-stats.ts). */
const PG_STATS_SETTINGS = {
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.track': 'all',
  'pg_stat_statements.track_planning': 'on',
};

export async function openBenchPostgres(log: (msg: string) => void, opts: { pgStats?: boolean } = {}): Promise<BenchPostgres> {
  let baseUrl: string;
  let appSecret: string;
  let stop: () => Promise<void> = async () => {};
  const databaseUrl = process.env.DATABASE_URL?.trim();
  if (databaseUrl) {
    appSecret = process.env.APP_SECRET?.trim() || randomBytes(32).toString('hex');
    // The same checks the app makes at start-up (URL scheme, secret length).
    loadConfig({ DATABASE_URL: databaseUrl, APP_SECRET: appSecret });
    baseUrl = databaseUrl;
    log(`using the PostgreSQL in DATABASE_URL (${new URL(databaseUrl).host})`);
  } else {
    const dataDir = mkdtempSync(join(tmpdir(), 'plover-bench-'));
    // mkdtemp makes it 0700; when we are root PostgreSQL runs as the postgres
    // user, which must be able to traverse it to the pg/ directory it owns.
    chmodSync(dataDir, 0o711);
    try {
      const embedded = await startEmbedded({ dataDir, log: (m) => log(`[db] ${m}`), settings: opts.pgStats ? PG_STATS_SETTINGS : {} });
      baseUrl = embedded.url;
      appSecret = embedded.appSecret;
      stop = async () => {
        try {
          await embedded.stop();
        } finally {
          rmSync(dataDir, { recursive: true, force: true });
        }
      };
    } catch (err) {
      rmSync(dataDir, { recursive: true, force: true });
      throw err;
    }
  }

  const open = new Set<BenchDatabase>();
  return {
    source: databaseUrl ? 'DATABASE_URL' : 'embedded',
    appSecret,
    async createDatabase() {
      const name = `plover_bench_${randomBytes(6).toString('hex')}`;
      const admin = new pg.Client({ connectionString: baseUrl });
      await admin.connect();
      try {
        await admin.query(`CREATE DATABASE ${name}`);
      } finally {
        await admin.end();
      }
      const url = withDatabase(baseUrl, name);
      const pool = createPool(url, 4);
      const db = createDb(pool);
      let dropped: Promise<void> | undefined;
      const database: BenchDatabase = {
        url,
        name,
        pool,
        db,
        appSecret,
        drop() {
          dropped ??= (async () => {
            open.delete(database);
            await db.destroy().catch(() => undefined);
            // Kysely ends the pool only if it used it (migrate() uses the pool directly).
            if (!pool.ended) await pool.end().catch(() => undefined);
            const c = new pg.Client({ connectionString: baseUrl });
            await c.connect();
            try {
              await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
            } finally {
              await c.end();
            }
          })();
          return dropped;
        },
      };
      open.add(database);
      try {
        await migrate(pool);
      } catch (err) {
        await database.drop().catch(() => undefined);
        throw err;
      }
      return database;
    },
    async close() {
      try {
        // drop() deletes d from the set; a Set's iteration goes on past a deleted entry.
        for (const d of open) await d.drop().catch((err) => log(`could not drop database ${d.name}: ${String(err)}`));
      } finally {
        await stop();
      }
    },
  };
}
