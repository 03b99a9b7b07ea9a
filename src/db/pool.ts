import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.ts';

// int8 (counts, bigint sums) as strings would leak into arithmetic; our counts
// fit in a double, and numeric stays a string to keep decimals exact.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export type Db = Kysely<Database>;

/**
 * A session idle inside a transaction this long is ended by PostgreSQL, and
 * its locks with it. Our transactions never wait on anything but the database
 * (DNS, SMTP and rendering happen outside them), so only a stuck client gets
 * there: one left holding its locks after a database outage kept a worker's
 * jobs waiting on them for good.
 */
export const IDLE_IN_TRANSACTION_MS = 60_000;

export function createPool(connectionString: string, max = 20, opts: { idleInTransactionMs?: number } = {}): pg.Pool {
  const idleMs = Math.trunc(opts.idleInTransactionMs ?? IDLE_IN_TRANSACTION_MS);
  const config: pg.PoolConfig & { onConnect: (client: pg.PoolClient) => Promise<void> } = {
    connectionString, max, idleTimeoutMillis: 30_000, connectionTimeoutMillis: 5_000,
    // pg-pool awaits this before it hands the new client out. A SET rather than a
    // startup parameter: connection poolers such as PgBouncer refuse unknown ones.
    // A refused SET leaves the session as it was rather than failing the connect.
    onConnect: async (client) => {
      await client.query(`SET idle_in_transaction_session_timeout = ${idleMs}`).catch(() => {});
    },
  };
  const pool = new pg.Pool(config);
  // An idle client's connection dying (database restart) must not crash the process.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

export function createDb(pool: pg.Pool): Db {
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
