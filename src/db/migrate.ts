// Numbered, immutable migration files (migrations/NNNN_name.sql), applied at
// start-up in one transaction under an advisory lock, so two processes starting
// together neither both apply a file nor see a half-migrated schema.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Logger, runMigrations } from 'graphile-worker';
import type pg from 'pg';

const MIGRATIONS_DIR = join(import.meta.dirname, 'migrations');
const LOCK_KEY = 'plover:migrate';

export type Migration = { version: number; name: string; sql: string };

export function listMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f) => ({ version: Number(f.slice(0, 4)), name: f.slice(5, -4), sql: readFileSync(join(dir, f), 'utf8') }));
}

/** Applies pending migrations; returns the names of those applied by this call. */
export async function migrate(pool: pg.Pool, dir = MIGRATIONS_DIR): Promise<string[]> {
  const migrations = listMigrations(dir);
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [LOCK_KEY]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
    const done = new Set(rows.map((r) => r.version));
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      await client.query(m.sql);
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
      applied.push(`${String(m.version).padStart(4, '0')}_${m.name}`);
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
  // graphile-worker's schema has its own versioning and locking.
  await runMigrations({ pgPool: pool, logger: quietLogger });
  return applied;
}

const quietLogger = new Logger(() => () => {});
