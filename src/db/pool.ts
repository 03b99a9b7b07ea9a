import { createHash } from 'node:crypto';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.ts';

// int8 (counts, bigint sums) as strings would leak into arithmetic; our counts
// fit in a double, and numeric stays a string to keep decimals exact.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));
// Date parameters are written in UTC, not in the process's time zone: in a zone
// whose old dates carry a local mean time offset with seconds (year 1 in
// America/New_York: -04:56:02), pg wrote the offset cut to whole minutes and
// the instant moved by seconds (a schedule or an event in year 1, found by review).
pg.defaults.parseInputDatesAsUTC = true;

export type Db = Kysely<Database>;

/**
 * A session idle inside a transaction this long is ended by PostgreSQL, and
 * its locks with it. Our transactions never wait on anything but the database
 * (DNS, SMTP and rendering happen outside them), so only a stuck client gets
 * there: one left holding its locks after a database outage kept a worker's
 * jobs waiting on them for good.
 */
export const IDLE_IN_TRANSACTION_MS = 60_000;

/**
 * The planner's cost of a page read out of order, for Plover's sessions
 * (PostgreSQL's default: 4, for spinning disks; 1.1 is the usual value for
 * data in memory or on SSD). At 4, a batch of a few dozen ids joined to a
 * table of under some 5,000 rows (a young message log, a new team's contacts)
 * was planned as a hash join over a sequential scan of the whole table, once
 * per batch: in `npm run bench -- campaigns` the statistics delta and the
 * contact counters read every row of the log and of contacts that way, 2-5 ms
 * a call where the index probes take well under one. `DATABASE_RANDOM_PAGE_COST`
 * sets it (`server`: the server's own setting); docs/operations.md.
 */
export const RANDOM_PAGE_COST = 1.1;

export type PoolOptions = {
  idleInTransactionMs?: number;
  /** null: the server's setting. Default RANDOM_PAGE_COST. */
  randomPageCost?: number | null;
};

export function createPool(connectionString: string, max = 20, opts: PoolOptions = {}): pg.Pool {
  const idleMs = Math.trunc(opts.idleInTransactionMs ?? IDLE_IN_TRANSACTION_MS);
  const pageCost = opts.randomPageCost === undefined ? RANDOM_PAGE_COST : opts.randomPageCost;
  if (pageCost !== null && !(Number.isFinite(pageCost) && pageCost > 0)) throw new RangeError(`createPool: randomPageCost must be a positive number, got ${pageCost}`);
  const config: pg.PoolConfig & { onConnect: (client: pg.PoolClient) => Promise<void> } = {
    connectionString, max, idleTimeoutMillis: 30_000, connectionTimeoutMillis: 5_000,
    // TCP keep-alive, first probe after 30 s idle: a connection whose server or network
    // went away without a word (a failover, a dropped NAT entry) errors once the
    // system's probes go unanswered (Linux: 9 probes 75 s apart) instead of never.
    keepAlive: true,
    keepAliveInitialDelayMillis: 30_000,
    // pg-pool awaits this before it hands the new client out. A SET rather than a
    // startup parameter: connection poolers such as PgBouncer refuse unknown ones.
    // A refused SET leaves the session as it was rather than failing the connect.
    onConnect: async (client) => {
      await client.query(`SET idle_in_transaction_session_timeout = ${idleMs}`).catch(() => {});
      if (pageCost !== null) await client.query(`SET random_page_cost = ${pageCost}`).catch(() => {});
    },
  };
  const pool = new pg.Pool(config);
  // An idle client's connection dying (database restart) must not crash the process.
  pool.on('error', () => {});
  pool.on('connect', (client) => {
    client.on('error', () => {});
    preparedStatements(client);
  });
  return pool;
}

/**
 * A statement whose text starts with this comment is run as a named prepared
 * statement (see preparedStatements).
 */
export const PREPARED = '/* prepared */';

const names = new Map<string, string>();

function statementName(text: string): string {
  let name = names.get(text);
  if (name === undefined) {
    name = `plover_${createHash('sha256').update(text).digest('base64url').slice(0, 22)}`;
    // Only statements marked in the source are named, so there are a handful; the bound is a safeguard.
    if (names.size >= 1_000) names.clear();
    names.set(text, name);
  }
  return name;
}

/**
 * Runs the statements marked PREPARED as named prepared statements: each
 * connection parses and plans one once, and PostgreSQL then reuses its plan
 * (a generic one after five executions, when that plan is not costlier than
 * planning each time; keyed by `= ANY ($1)` and called with one id, the
 * custom plan always looks cheaper, so such a statement saves its parse but
 * is planned at every execution: src/db/ids.ts). A few hot statements of the send and event
 * paths cost more to plan than to run: loading a send batch's context, as the
 * eight-way join it was, took 4.7 ms to plan and 0.25 ms to run (EXPLAIN on an
 * empty schema; its joins are now subqueries, src/mail/send.ts)
 * and the webhook fan-out 1.3 ms against well under one (docs/decisions.md,
 * "Prepared statements"). Only statements keyed by ids or a unique key are
 * marked: a generic plan is then the plan a custom one would be (the contact
 * upsert's is tested under both). Named statements need a session
 * per connection, as LISTEN already does (PgBouncer in session mode; see
 * docs/operations.md).
 */
function preparedStatements(client: pg.PoolClient): void {
  type Query = (this: pg.PoolClient, ...args: unknown[]) => unknown;
  (client as unknown as { query: Query }).query = function (this: pg.PoolClient, ...args: unknown[]) {
    // The prototype's method at each call, not one captured at connect: a wrapper
    // installed on it later (bench/lib/query-time.ts) still sees every statement.
    // oxlint-disable-next-line typescript/unbound-method -- called below with .call/.apply(this), bound to this client
    const query = pg.Client.prototype.query as unknown as Query;
    const [text, values] = args;
    if (typeof text === 'string' && text.startsWith(PREPARED) && (values === undefined || Array.isArray(values))) {
      return query.call(this, { name: statementName(text), text, values }, ...args.slice(2));
    }
    return query.apply(this, args);
  };
}

export function createDb(pool: pg.Pool): Db {
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
