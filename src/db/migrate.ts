// Numbered, immutable migration files (migrations/NNNN_name.sql), applied at
// start-up in one transaction under an advisory lock, so two processes starting
// together neither both apply a file nor see a half-migrated schema.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Logger, runMigrations } from 'graphile-worker';
import type pg from 'pg';

const MIGRATIONS_DIR = join(import.meta.dirname, 'migrations');
const LOCK_KEY = 'plover:migrate';

export type Migration = { version: number; name: string; sql: string; file: string; checksum: string };

/**
 * Checksums of earlier versions of files whose later edits changed comments
 * only (the SQL run is the same). A database that applied an earlier version
 * is accepted and its recorded checksum moved to today's. Add an entry only
 * for a comment-only edit, with the old sha256 of the whole file.
 */
export const COMMENT_ONLY_EDITS: Record<string, string[]> = {
  // The first lines cited a specification file outside the repository; they cite docs/api.md now.
  '0003_webhooks_and_workers.sql': ['b1e177bce990a17e5a25486696594f61227e0e922cfe16735e0cf4cc47cf4ebd'],
  '0005_engine.sql': ['9d499f8788e57796540f8bfa90f78a9087afadf8961293544864fd5ea29b8f8e'],
};

/** An applied migration file was edited afterwards: start-up stops rather than run on a schema nobody can rebuild. */
export class MigrationChecksumError extends Error {}

export function listMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f) => {
      const bytes = readFileSync(join(dir, f));
      return {
        version: Number(f.slice(0, 4)),
        name: f.slice(5, -4),
        sql: bytes.toString('utf8'),
        file: f,
        checksum: createHash('sha256').update(bytes).digest('hex'),
      };
    });
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
    // The checksum column is added here, not by a numbered file: this table is
    // the migration mechanism's own, and a database migrated before checksums
    // existed must get the column before any file is compared.
    await client.query('ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text');
    const { rows } = await client.query<{ version: number; checksum: string | null }>('SELECT version, checksum FROM schema_migrations');
    const done = new Map(rows.map((r) => [r.version, r.checksum]));
    for (const m of migrations) {
      if (!done.has(m.version)) continue;
      const recorded = done.get(m.version);
      if (recorded === null || (recorded !== m.checksum && recorded !== undefined && (COMMENT_ONLY_EDITS[m.file] ?? []).includes(recorded))) {
        // Applied before checksums were recorded, or applied as a version that
        // differs from this one in comments only: the file as it is now is
        // taken as the applied one.
        await client.query('UPDATE schema_migrations SET checksum = $2 WHERE version = $1', [m.version, m.checksum]);
      } else if (recorded !== m.checksum) {
        throw new MigrationChecksumError(
          `migration ${m.file} was changed after it was applied (sha256 ${recorded} recorded, ${m.checksum} on disk). ` +
            'Applied migrations are immutable: restore the file and put the change in a new numbered migration.',
        );
      }
    }
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      await client.query(m.sql);
      await client.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [m.version, m.name, m.checksum]);
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
