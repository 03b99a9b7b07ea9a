import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import pg from 'pg';
import { COMMENT_ONLY_EDITS, listMigrations, migrate, MigrationChecksumError } from '../../src/db/migrate.ts';
import { createPool } from '../../src/db/pool.ts';
import { baseUrl } from '../helpers.ts';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');

async function emptyDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `plover_m_${Math.random().toString(36).slice(2, 10)}`;
  const admin = new pg.Client({ connectionString: baseUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(baseUrl());
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: baseUrl() });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

test('migration files are numbered without gaps', () => {
  const versions = listMigrations().map((m) => m.version);
  assert.ok(versions.length > 0);
  assert.deepEqual(versions, versions.map((_, i) => i + 1));
});

test('migrate applies everything once and is idempotent', async () => {
  const d = await emptyDatabase();
  const pool = createPool(d.url, 2);
  try {
    const first = await migrate(pool);
    assert.equal(first.length, listMigrations().length);
    assert.deepEqual(await migrate(pool), []);
    const { rows } = await pool.query('SELECT version FROM schema_migrations ORDER BY version');
    assert.deepEqual(rows.map((r) => r.version), listMigrations().map((m) => m.version));
  } finally {
    await pool.end();
    await d.drop();
  }
});

test('two processes migrating a fresh database at once are both safe', async () => {
  const d = await emptyDatabase();
  try {
    const runOne = () =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
        execFile(process.execPath, [CLI, 'migrate'], { env: { ...process.env, DATABASE_URL: d.url } }, (err, stdout, stderr) =>
          resolve({ code: err ? 1 : 0, stdout, stderr }),
        ),
      );
    const results = await Promise.all([runOne(), runOne(), runOne()]);
    for (const r of results) assert.equal(r.code, 0, r.stderr);
    // Exactly one of them applied the files; the others found nothing to do.
    assert.equal(results.filter((r) => r.stdout.includes('applied:')).length, 1);
    assert.equal(results.filter((r) => r.stdout.includes('up to date')).length, 2);
    const c = new pg.Client({ connectionString: d.url });
    await c.connect();
    const { rows } = await c.query('SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version');
    await c.end();
    assert.equal(rows.length, listMigrations().length);
    for (const r of rows) assert.equal(r.n, 1);
  } finally {
    await d.drop();
  }
});

test('a failing migration rolls back entirely: nothing half-applied', async () => {
  const d = await emptyDatabase();
  const dir = mkdtempSync(join(tmpdir(), 'plover-mig-'));
  writeFileSync(join(dir, '0001_ok.sql'), 'CREATE TABLE good (id int);');
  writeFileSync(join(dir, '0002_bad.sql'), 'CREATE TABLE also_good (id int); SELECT no_such_function();');
  const pool = createPool(d.url, 2);
  try {
    await assert.rejects(migrate(pool, dir), /no_such_function/);
    const { rows } = await pool.query("SELECT to_regclass('good') AS a, to_regclass('also_good') AS b, to_regclass('schema_migrations') AS m");
    assert.deepEqual(rows[0], { a: null, b: null, m: null });
  } finally {
    await pool.end();
    await d.drop();
  }
});

test('an applied migration edited afterwards stops migrate with a message naming the file', async () => {
  const d = await emptyDatabase();
  const dir = mkdtempSync(join(tmpdir(), 'plover-mig-'));
  writeFileSync(join(dir, '0001_first.sql'), 'CREATE TABLE first (id int);');
  writeFileSync(join(dir, '0002_second.sql'), 'CREATE TABLE second (id int);');
  const pool = createPool(d.url, 2);
  try {
    assert.deepEqual(await migrate(pool, dir), ['0001_first', '0002_second']);
    const { rows } = await pool.query('SELECT version, checksum FROM schema_migrations ORDER BY version');
    assert.deepEqual(rows.map((r) => r.checksum), listMigrations(dir).map((m) => m.checksum));
    assert.match(rows[0].checksum, /^[0-9a-f]{64}$/);
    writeFileSync(join(dir, '0002_second.sql'), 'CREATE TABLE second (id bigint);');
    writeFileSync(join(dir, '0003_third.sql'), 'CREATE TABLE third (id int);');
    await assert.rejects(migrate(pool, dir), (e: Error) => e instanceof MigrationChecksumError && /0002_second\.sql/.test(e.message));
    // Nothing after the check ran: the new file was not applied either.
    const third = await pool.query("SELECT to_regclass('third') AS t");
    assert.equal(third.rows[0].t, null);
  } finally {
    await pool.end();
    await d.drop();
  }
});

test('a database migrated before checksums existed gets them backfilled, then checked', async () => {
  const d = await emptyDatabase();
  const dir = mkdtempSync(join(tmpdir(), 'plover-mig-'));
  writeFileSync(join(dir, '0001_first.sql'), 'CREATE TABLE first (id int);');
  const pool = createPool(d.url, 2);
  try {
    // The table as the migrator before checksums left it.
    await pool.query(`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
      CREATE TABLE first (id int); INSERT INTO schema_migrations (version, name) VALUES (1, 'first')`);
    assert.deepEqual(await migrate(pool, dir), []);
    const { rows } = await pool.query('SELECT checksum FROM schema_migrations WHERE version = 1');
    assert.equal(rows[0].checksum, listMigrations(dir)[0]!.checksum);
    writeFileSync(join(dir, '0001_first.sql'), 'CREATE TABLE first (id int, x int);');
    await assert.rejects(migrate(pool, dir), /0001_first\.sql was changed after it was applied/);
  } finally {
    await pool.end();
    await d.drop();
  }
});

test('a database that applied a file before a comment-only edit is accepted, and its checksum moves to the edited file', async () => {
  const d = await emptyDatabase();
  const pool = createPool(d.url, 2);
  try {
    await migrate(pool);
    const now = new Map(listMigrations().map((m) => [m.file, m]));
    for (const [file, [old]] of Object.entries(COMMENT_ONLY_EDITS)) {
      const m = now.get(file);
      assert.ok(m, `${file} exists`);
      assert.notEqual(old, m.checksum);
      await pool.query('UPDATE schema_migrations SET checksum = $2 WHERE version = $1', [m.version, old]);
    }
    // Another checksum than the listed old one is still refused.
    await pool.query("UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE version = 1");
    await assert.rejects(migrate(pool), MigrationChecksumError);
    await pool.query('UPDATE schema_migrations SET checksum = $1 WHERE version = 1', [listMigrations()[0]!.checksum]);
    assert.deepEqual(await migrate(pool), []);
    const { rows } = await pool.query<{ version: number; checksum: string }>('SELECT version, checksum FROM schema_migrations');
    for (const file of Object.keys(COMMENT_ONLY_EDITS)) {
      const m = now.get(file)!;
      assert.equal(rows.find((r) => r.version === m.version)?.checksum, m.checksum, file);
    }
  } finally {
    await pool.end();
    await d.drop();
  }
});
