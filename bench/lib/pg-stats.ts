// `--pg-stats`: PostgreSQL's own time per statement over a phase of a
// benchmark, from pg_stat_statements (execution and planning time, calls, rows,
// WAL records), for the statements of the bench's database, nested ones (the
// foreign-key checks of an INSERT, the statements inside a function) included.
// bench/lib/query-time.ts times statements from the client, waits included;
// this is the server's side. The extension must be preloaded: the embedded
// server is started with it when the switch is given (bench/lib/postgres.ts);
// a DATABASE_URL server needs `shared_preload_libraries = 'pg_stat_statements'`.
import { sql } from 'kysely';
import type { Db } from '../../src/db/pool.ts';
import { fmt, table } from './report.ts';

export type StatementStats = { calls: number; execMs: number; planMs: number; rows: number; wal: number; nested: boolean; query: string };

export type PgStats = {
  /** Forgets what was counted so far for this database. */
  reset(): Promise<void>;
  /** This database's statements since the last reset, most time first. */
  top(n: number): Promise<StatementStats[]>;
};

export async function pgStats(db: Db, log: (msg: string) => void): Promise<PgStats> {
  try {
    await sql`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`.execute(db);
    await sql`SELECT count(*) FROM pg_stat_statements`.execute(db);
  } catch (err) {
    throw new Error('--pg-stats needs pg_stat_statements on the server: preloaded (shared_preload_libraries) and the right to create the extension. ' +
      `Unset DATABASE_URL to use the embedded server, which the bench starts with it (${(err as Error).message})`);
  }
  const { rows: [settings] } = await sql<{ track: string | null; planning: string | null; version: number }>`
    SELECT current_setting('pg_stat_statements.track', true) AS track, current_setting('pg_stat_statements.track_planning', true) AS planning,
           current_setting('server_version_num')::int AS version`.execute(db);
  const mergesKeyChecks = (settings?.version ?? 0) >= 180000;
  if (settings?.track !== 'all') log(`--pg-stats: pg_stat_statements.track is ${settings?.track ?? 'unset'}, not all: nested statements (foreign-key checks) are not counted`);
  if (settings?.planning !== 'on') log('--pg-stats: pg_stat_statements.track_planning is off: planning time reads 0');
  return {
    async reset() {
      // This database's counts only: a shared server keeps everyone else's.
      await sql`SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`.execute(db);
    },
    async top(n) {
      const { rows } = await sql<{ calls: string; exec: number; plan: number; rows: string; wal: string; toplevel: boolean; query: string | null }>`
        SELECT calls, total_exec_time AS exec, total_plan_time AS plan, rows, wal_records AS wal, toplevel, query
          FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         ORDER BY total_exec_time + total_plan_time DESC LIMIT ${n}`.execute(db);
      return rows.map((r) => {
        const query = (r.query ?? '').replace(/\s+/g, ' ').trim();
        return {
          calls: Number(r.calls), execMs: r.exec, planMs: r.plan, rows: Number(r.rows), wal: Number(r.wal), nested: !r.toplevel,
          query: mergesKeyChecks && !r.toplevel && FOREIGN_KEY_CHECK.test(query) ? `${FOREIGN_KEY_CHECKS}: ${query}` : query,
        };
      });
    },
  };
}

// A foreign-key check of a one-column key is PostgreSQL's `SELECT 1 FROM ONLY
// "public"."<table>" x WHERE "<column>" = $1 FOR KEY SHARE OF x`. From version
// 18 PostgreSQL identifies a statement by its tables' names as written, here the
// alias `x` of every check, so the checks of all such keys count as one
// statement, shown with the text of the first one seen (e.g. "teams" for all of
// them): that row is named for what it is. Before 18 each table's checks are a
// row of their own, named by their text.
const FOREIGN_KEY_CHECK = /^SELECT (1|\$\d+) FROM ONLY "[^"]+"\."[^"]+" x WHERE "[^"]+" OPERATOR\(pg_catalog\.=\) \$1 FOR KEY SHARE OF x$/;
const FOREIGN_KEY_CHECKS = 'foreign-key checks, all tables';

/** The statements as a table, per `unit` (e.g. per e-mail: `count` e-mails). */
export function statsTable(stats: StatementStats[], unit: string, count: number): string {
  const per = (v: number) => v / Math.max(1, count);
  return table(
    ['statement (nested: * )', `calls/${unit}`, `exec µs/${unit}`, `plan µs/${unit}`, `rows/${unit}`, `WAL records/${unit}`],
    stats.map((s) => [
      `${s.nested ? '* ' : ''}${s.query.slice(0, 72)}`,
      fmt(per(s.calls), 2), fmt(per(s.execMs) * 1000, 0), fmt(per(s.planMs) * 1000, 0), fmt(per(s.rows), 2), fmt(per(s.wal), 1),
    ]),
    ['left', 'right', 'right', 'right', 'right', 'right'],
  );
}
