// `npm run bench -- bulk-upsert [--contacts <n>]`: contacts/s of the bulk upsert
// through the API against the same work without HTTP.
//
// N generated contacts (default 200,000; every field filled, distinct
// addresses) in 1,000-contact batches, 4 batches in flight, first as inserts
// and then as updates (each contact changes a few fields), along three paths,
// each on its own fresh database:
//
//   API       POST /public/v1/email/contacts/bulk-upsert to the real app in its
//             own process (bench/servers/app.ts), from undici in this one;
//   baseline  in this process, what the route does minus HTTP: JSON.parse of the
//             same body, toPatches(), and upsertContacts() (the UPSERT statement,
//             which also writes the events, and their jobs) in a Kysely transaction on a pg pool of 4;
//   raw SQL   the UPSERT statement alone (no events, no transaction), through pg.
//
// The request bodies are generated before anything is timed; the baseline and
// raw paths parse the very same strings. Every batch's summary is checked
// (inserts: all created; updates: all updated), and so are the rows at the end.
// Before the measured passes of a path: an unmeasured warm-up (insert and
// update passes of a few batches for another team: JIT, pools, key cache);
// CHECKPOINT before each pass and VACUUM ANALYZE before the update pass, so
// checkpoints and autovacuum hit every path alike. The insert pass gets no
// ANALYZE: it runs on the statistics a fresh import into a new team would see
// (the plan the UPSERT gets is reported before and after each pass).
//
// Where the time goes: CPU time of the app process, of this process (load
// generator, or the whole baseline) and of PostgreSQL's processes when it runs
// on this machine, over each pass (lib/cpu.ts); WAL written; the baseline's
// time per query kind; and the app-side JavaScript stages of one batch
// measured alone in this process.
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Kysely, PostgresDialect, type LogEvent } from 'kysely';
import type pg from 'pg';
import { Pool as HttpPool } from 'undici';
import { toPatches, upsertContacts, upsertStatement, type ContactPatch } from '../src/contacts/queries.ts';
import { BulkUpsertBody, type ContactInputT } from '../src/contacts/schemas.ts';
import { createPool } from '../src/db/pool.ts';
import type { Database } from '../src/db/schema.ts';
import { validatorCompiler } from '../src/http/schemas.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { localPostmaster, machineCpu, postgresCpuSeconds, type MachineCpu } from './lib/cpu.ts';
import { LatencyHistogram } from './lib/histogram.ts';
import type { BenchDatabase, BenchPostgres } from './lib/postgres.ts';
import { fmt, round, table } from './lib/report.ts';
import { startServer, type ServerProcess } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';

const ROUTE = '/public/v1/email/contacts/bulk-upsert';
const DEFAULT_CONTACTS = 200_000;
const BATCH = 1000; // the route's maximum
const IN_FLIGHT = 4;
const WARMUP_BATCHES = 8;
const REQUEST_TAGS = ['bench-import'];
const GOAL_RATIO = 0.6;
const GOAL_API_PER_SEC = 50_000;

type Pass = 'insert' | 'update';
const PASSES: Pass[] = ['insert', 'update'];
type Path = 'api' | 'baseline' | 'raw';
const LABEL: Record<Path, string> = { api: 'API', baseline: 'baseline', raw: 'raw SQL' };

type Batch = { body: string; size: number };
type Summary = { received: number; created: number; updated: number; unchanged: number };
type Send = (batch: Batch) => Promise<Summary>;

type PassResult = {
  path: Path;
  pass: Pass;
  contacts: number;
  batches: number;
  wallS: number;
  contactsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  meanMs: number;
  maxMs: number;
  /** CPU seconds over the pass; app only for the API path, postgres only when it is local. */
  cpuS: { app?: number; bench: number; postgres?: number };
  /** CPU seconds machine-wide (every process and the kernel) over the pass, when /proc/stat is there. */
  machineBusyS?: number;
  /** WAL written over the pass (whole server). */
  walBytes: number;
  /** Checkpoints started over the pass (whole server; one is forced just before it). */
  checkpoints?: number;
  /** How the UPSERT looks up existing rows (its UPDATE branch's join), planned just before and just after the pass. */
  plan: { before: string; after: string };
  /** Baseline only: ms per batch by query kind (wall, from Kysely's query log). */
  queryMsPerBatch?: Record<string, number>;
};

type PathResult = {
  path: Path;
  passes: Record<Pass, PassResult>;
  rows: { contacts: number; events: number; updatedContacts: number };
};

// ---------------------------------------------------------------------------
// Generated contacts: every field filled; the update version changes first_name,
// custom_str_1, custom_int_1, custom_datetime_1 and custom_bool_1.

const T0 = Date.UTC(2025, 0, 1);

function contact(prefix: string, i: number, pass: Pass) {
  const v2 = pass === 'update';
  return {
    email: `${prefix}.${i}@example${i % 100}.com`,
    first_name: v2 ? `First${i}-v2` : `First${i}`,
    last_name: `Last${i}`,
    phone: `+1555${String(i % 10_000_000).padStart(7, '0')}`,
    foreign_id: `crm-${prefix}-${i}`,
    country_code: 'US',
    custom_str_1: v2 ? `plan-pro-${i % 7}` : `plan-basic-${i % 7}`,
    custom_str_2: `utm_source=newsletter&utm_campaign=c${i % 50}`,
    custom_str_3: 'Springfield',
    custom_str_4: `account-manager-${i % 13}`,
    custom_str_5: 'imported from the old CRM',
    custom_int_1: v2 ? i + 1 : i,
    custom_int_2: i % 1000,
    custom_int_3: i * 3,
    custom_int_4: -i,
    custom_int_5: 42,
    custom_dec_1: (i % 10_000) / 100 + 0.25,
    custom_dec_2: 19.99,
    custom_dec_3: -0.5,
    custom_datetime_1: new Date(T0 + i * 60_000 + (v2 ? 86_400_000 : 0)).toISOString(),
    custom_datetime_2: new Date(T0 + (i % 365) * 86_400_000).toISOString(),
    custom_datetime_3: '2026-03-01T12:00:00+02:00',
    custom_bool_1: v2 ? i % 2 === 1 : i % 2 === 0,
    custom_bool_2: true,
    custom_bool_3: false,
    tags: ['newsletter', `group-${i % 10}`],
  };
}

function makeBatches(prefix: string, count: number, pass: Pass): Batch[] {
  const batches: Batch[] = [];
  for (let start = 0; start < count; start += BATCH) {
    const size = Math.min(BATCH, count - start);
    const contacts = Array.from({ length: size }, (_, j) => contact(prefix, start + j, pass));
    batches.push({ body: JSON.stringify({ contacts, tags: REQUEST_TAGS }), size });
  }
  return batches;
}

// ---------------------------------------------------------------------------
// One pass: every batch once, IN_FLIGHT at a time, each summary checked.

function checkSummary(s: Summary, size: number, pass: Pass): string | undefined {
  const want: Summary =
    pass === 'insert'
      ? { received: size, created: size, updated: 0, unchanged: 0 }
      : { received: size, created: 0, updated: size, unchanged: 0 };
  const got = { received: s?.received, created: s?.created, updated: s?.updated, unchanged: s?.unchanged };
  return JSON.stringify(got) === JSON.stringify(want) ? undefined : `summary ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`;
}

type Probe = { app?: ServerProcess; postmaster?: number; stats: pg.Pool };
type Sample = { app?: number; bench: number; postgres?: number; machine?: MachineCpu; wal: number; checkpoints?: number };

// Checkpoint counters moved to pg_stat_checkpointer in PostgreSQL 17.
const CHECKPOINT_COUNTERS = [
  'SELECT (num_timed + num_requested)::float8 AS n FROM pg_stat_checkpointer',
  'SELECT (checkpoints_timed + checkpoints_req)::float8 AS n FROM pg_stat_bgwriter',
];

async function sample(probe: Probe): Promise<Sample> {
  const appUsage = await probe.app?.cpuUsage();
  const { rows } = await probe.stats.query<{ wal: number }>(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 AS wal`);
  let checkpoints: number | undefined;
  for (const sql of CHECKPOINT_COUNTERS) {
    try {
      checkpoints = (await probe.stats.query<{ n: number }>(sql)).rows[0].n;
      break;
    } catch {
      // the other version's view
    }
  }
  const own = process.cpuUsage();
  return {
    app: appUsage && (appUsage.user + appUsage.system) / 1e6,
    bench: (own.user + own.system) / 1e6,
    postgres: probe.postmaster === undefined ? undefined : postgresCpuSeconds(probe.postmaster),
    machine: machineCpu(),
    wal: rows[0].wal,
    checkpoints,
  };
}

const diff = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? undefined : b - a);

async function runPass(path: Path, pass: Pass, batches: Batch[], send: Send, probe: Probe): Promise<PassResult> {
  const latencies = new LatencyHistogram();
  let next = 0;
  let failure: unknown;
  const worker = async () => {
    while (failure === undefined && next < batches.length) {
      const i = next++;
      const started = performance.now();
      try {
        const summary = await send(batches[i]);
        latencies.record(performance.now() - started);
        const problem = checkSummary(summary, batches[i].size, pass);
        if (problem) throw new Error(problem);
      } catch (err) {
        failure ??= new Error(`${LABEL[path]} ${pass}, batch ${i}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  };
  const before = await sample(probe);
  const t0 = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const wallS = (performance.now() - t0) / 1000;
  const after = await sample(probe);
  if (failure !== undefined) throw failure;
  const contacts = batches.reduce((n, b) => n + b.size, 0);
  return {
    path,
    pass,
    contacts,
    batches: batches.length,
    wallS,
    contactsPerSec: contacts / wallS,
    p50Ms: latencies.percentileMs(50),
    p99Ms: latencies.percentileMs(99),
    meanMs: latencies.meanMs(),
    maxMs: latencies.maxMs(),
    cpuS: { app: diff(before.app, after.app), bench: after.bench - before.bench, postgres: diff(before.postgres, after.postgres) },
    plan: { before: '', after: '' }, // filled in by runPath
    machineBusyS: before.machine && after.machine ? after.machine.busy - before.machine.busy : undefined,
    walBytes: after.wal - before.wal,
    checkpoints: diff(before.checkpoints, after.checkpoints),
  };
}

// ---------------------------------------------------------------------------
// The three paths. Each gets a fresh database with a bench team and a warm-up
// team, and returns a sender per team.

type Target = {
  send(teamId: string): Send;
  probe: Probe;
  close(): Promise<void>;
  /** Baseline only: ms spent so far by query kind. */
  queryTotals?(): Record<string, number>;
};

type Ctx = { opts: BenchOptions; pg: BenchPostgres; postmaster?: number; upsertSql: string };

function parseBody(batch: Batch) {
  const body = JSON.parse(batch.body) as { contacts: ContactInputT[]; tags?: string[] };
  return { contacts: body.contacts, patches: toPatches(body.contacts, body.tags ?? []) };
}

async function apiTarget(ctx: Ctx, database: BenchDatabase, teamIds: string[]): Promise<Target> {
  const keys = new Map<string, string>();
  for (const id of teamIds) keys.set(id, (await createApiKey(database.db, id, 'bench key')).key);
  const params: AppServerParams = { databaseUrl: database.url, appSecret: database.appSecret };
  const app = await startServer('app', params, { log: ctx.opts.log });
  ctx.opts.defer(() => app.stop());
  const http = new HttpPool(app.origin, { connections: IN_FLIGHT, pipelining: 1, keepAliveTimeout: 60_000 });
  let httpClosed: Promise<void> | undefined;
  const closeHttp = () => (httpClosed ??= http.close());
  ctx.opts.defer(closeHttp);
  return {
    probe: { app, postmaster: ctx.postmaster, stats: database.pool },
    send: (teamId) => {
      const headers = { 'content-type': 'application/json', 'x-api-key': keys.get(teamId)! };
      return async (batch) => {
        const res = await http.request({ path: ROUTE, method: 'POST', headers, body: batch.body });
        const text = await res.body.text();
        if (res.statusCode !== 200) throw new Error(`POST ${ROUTE} answered ${res.statusCode}: ${text.slice(0, 500)}`);
        return (JSON.parse(text) as { summary: Summary }).summary;
      };
    },
    async close() {
      await closeHttp();
      await app.stop();
    },
  };
}

/** Which query of upsertContacts() a logged statement is. */
function queryKind(sqlText: string): string {
  const s = sqlText.trim().toLowerCase();
  if (s === 'begin' || s.startsWith('start transaction')) return 'begin';
  if (s === 'commit') return 'commit';
  if (s.includes('on conflict (team_id, email) do nothing')) return 'upsert';
  if (s.includes('graphile_worker.add_jobs')) return 'jobs';
  return 'other';
}

async function baselineTarget(ctx: Ctx, database: BenchDatabase): Promise<Target> {
  // As createDb() (src/db/pool.ts) builds it, plus a query log for the time per query kind.
  const pool = createPool(database.url, IN_FLIGHT);
  const queryMs = new Map<string, number>();
  const log = (e: LogEvent) => {
    const kind = queryKind(e.query.sql);
    queryMs.set(kind, (queryMs.get(kind) ?? 0) + e.queryDurationMillis);
  };
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }), log });
  ctx.opts.defer(() => closeDb(db, pool));
  return {
    probe: { postmaster: ctx.postmaster, stats: database.pool },
    send: (teamId) => async (batch) => {
      const { contacts, patches } = parseBody(batch);
      const r = await db.transaction().execute((tx) => upsertContacts(tx, teamId, patches));
      return { received: contacts.length, created: r.created.length, updated: r.updated.length, unchanged: r.unchanged };
    },
    queryTotals: () => Object.fromEntries(queryMs),
    close: () => closeDb(db, pool),
  };
}

async function rawTarget(ctx: Ctx, database: BenchDatabase): Promise<Target> {
  const sqlText = ctx.upsertSql;
  const pool = createPool(database.url, IN_FLIGHT);
  ctx.opts.defer(() => (pool.ended ? undefined : pool.end()));
  return {
    probe: { postmaster: ctx.postmaster, stats: database.pool },
    send: (teamId) => async (batch) => {
      const { contacts, patches } = parseBody(batch);
      const { rows } = await pool.query<{ outcome: string }>(sqlText, upsertParams(teamId, patches));
      let created = 0;
      let updated = 0;
      let pre = 0;
      for (const r of rows) {
        if (r.outcome === 'created') created++;
        else if (r.outcome === 'updated') updated++;
        else pre++;
      }
      return { received: contacts.length, created, updated, unchanged: pre - updated };
    },
    close: async () => {
      if (!pool.ended) await pool.end();
    },
  };
}

const closing = new WeakSet<object>();
async function closeDb(db: Kysely<Database>, pool: pg.Pool): Promise<void> {
  if (closing.has(pool)) return;
  closing.add(pool);
  await db.destroy().catch(() => undefined);
  if (!pool.ended) await pool.end().catch(() => undefined);
}

/** The UPSERT statement's parameters, as upsertContacts() passes them for the baseline (no tag cap). */
function upsertParams(teamId: string, patches: ContactPatch[]): unknown[] {
  return upsertStatement(teamId, patches).params;
}

type PlanNode = { 'Node Type': string; 'Subplan Name'?: string; 'Relation Name'?: string; Plans?: PlanNode[] };

/**
 * How the UPSERT would find a batch's existing rows now: 'index lookups' (a
 * nested loop over the (team_id, email) index: cost per input row) or e.g.
 * 'hash join' (reads every row of the team: cost grows with the team's size).
 * The planner picks from statistics, so this can change as the table grows.
 */
async function lookupPlan(pool: pg.Pool, sqlText: string, teamId: string, batch: Batch): Promise<string> {
  const { rows } = await pool.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
    `EXPLAIN (FORMAT JSON) ${sqlText}`,
    upsertParams(teamId, parseBody(batch).patches),
  );
  const find = (n: PlanNode): PlanNode | undefined =>
    n['Subplan Name'] === 'CTE upd' ? n : (n.Plans ?? []).map(find).find((x) => x !== undefined);
  const upd = find(rows[0]['QUERY PLAN'][0].Plan);
  const join = upd?.Plans?.[0];
  if (!join) return 'unknown';
  const inner = join.Plans?.[1];
  if (join['Node Type'] === 'Nested Loop' && inner?.['Relation Name'] === 'contacts' && /^Index (Only )?Scan$/.test(inner['Node Type'])) {
    return 'index lookups';
  }
  const type = join['Node Type'].toLowerCase();
  return join['Node Type'] === 'Nested Loop' && inner ? `${type} over ${inner['Node Type'].toLowerCase()}` : type;
}

let checkpointWarned = false;
async function settle(database: BenchDatabase, pass: Pass, log: (msg: string) => void): Promise<void> {
  if (pass === 'update') await database.pool.query('VACUUM (ANALYZE) contacts, events');
  try {
    await database.pool.query('CHECKPOINT');
  } catch (err) {
    if (!checkpointWarned) log(`bulk-upsert: CHECKPOINT failed (${(err as Error).message}); continuing without`);
    checkpointWarned = true;
  }
}

async function runPath(
  ctx: Ctx,
  path: Path,
  bodies: Record<Pass, Batch[]>,
  warmup: Record<Pass, Batch[]>,
): Promise<PathResult> {
  const { opts } = ctx;
  const database = await ctx.pg.createDatabase();
  opts.defer(() => database.drop());
  const team = await createTeam(database.db, 'Bench team');
  const warmTeam = await createTeam(database.db, 'Warm-up team');
  const target =
    path === 'api'
      ? await apiTarget(ctx, database, [team.id, warmTeam.id])
      : path === 'baseline'
        ? await baselineTarget(ctx, database)
        : await rawTarget(ctx, database);

  opts.log(`bulk-upsert: ${LABEL[path]}: warm-up (${warmup.insert.length} batches inserted, then updated)`);
  for (const pass of PASSES) await runPass(path, pass, warmup[pass], target.send(warmTeam.id), target.probe);

  const passes = {} as Record<Pass, PassResult>;
  for (const pass of PASSES) {
    await settle(database, pass, opts.log);
    opts.log(`bulk-upsert: ${LABEL[path]}: ${pass} pass (${fmt(bodies[pass].length, 0)} batches)`);
    const before = target.queryTotals?.();
    // Planned on the statement without events: its lookup of existing rows is the
    // same CTE in the one the API and the baseline run.
    const planBefore = await lookupPlan(database.pool, ctx.upsertSql, team.id, bodies[pass][0]);
    const r = await runPass(path, pass, bodies[pass], target.send(team.id), target.probe);
    r.plan = { before: planBefore, after: await lookupPlan(database.pool, ctx.upsertSql, team.id, bodies[pass][0]) };
    const after = target.queryTotals?.();
    if (before && after) {
      r.queryMsPerBatch = Object.fromEntries(Object.entries(after).map(([k, ms]) => [k, (ms - (before[k] ?? 0)) / r.batches]));
    }
    passes[pass] = r;
    opts.log(
      `bulk-upsert: ${LABEL[path]} ${pass}: ${fmt(r.contactsPerSec)} contacts/s in ${fmt(r.wallS, 2)} s, ` +
        `p50 ${fmt(r.p50Ms, 1)} ms, p99 ${fmt(r.p99Ms, 1)} ms`,
    );
  }
  await target.close();

  const { rows } = await database.pool.query<{ contacts: number; events: number; updated: number }>(
    `SELECT (SELECT count(*) FROM contacts WHERE team_id = $1)::int AS contacts,
            (SELECT count(*) FROM events WHERE team_id = $1)::int AS events,
            (SELECT count(*) FROM contacts WHERE team_id = $1 AND first_name LIKE '%-v2')::int AS updated`,
    [team.id],
  );
  const counted = { contacts: rows[0].contacts, events: rows[0].events, updatedContacts: rows[0].updated };
  const n = passes.insert.contacts;
  const want = { contacts: n, events: path === 'raw' ? 0 : 2 * n, updatedContacts: n };
  if (JSON.stringify(counted) !== JSON.stringify(want)) {
    throw new Error(`${LABEL[path]}: rows at the end ${JSON.stringify(counted)}, expected ${JSON.stringify(want)}`);
  }
  await database.drop();
  return { path, passes, rows: counted };
}

// ---------------------------------------------------------------------------
// The app's JavaScript stages for one batch, alone in this process.

type Stages = { parseMs: number; validateMs: number; toPatchesMs: number; stringifyMs: number };

function measureStages(body: string): Stages {
  const validate = validatorCompiler({ schema: BulkUpsertBody, method: 'POST', url: ROUTE, httpPart: 'body' }) as (
    data: unknown,
  ) => boolean;
  const samples: Record<keyof Stages, number[]> = { parseMs: [], validateMs: [], toPatchesMs: [], stringifyMs: [] };
  for (let i = 0; i < 25; i++) {
    const t0 = performance.now();
    const parsed = JSON.parse(body) as { contacts: ContactInputT[]; tags: string[] };
    const t1 = performance.now();
    if (!validate(parsed)) throw new Error('a generated batch fails the route schema');
    const t2 = performance.now();
    const patches = toPatches(parsed.contacts, parsed.tags);
    const t3 = performance.now();
    JSON.stringify(patches);
    const t4 = performance.now();
    if (i < 5) continue; // warm-up
    samples.parseMs.push(t1 - t0);
    samples.validateMs.push(t2 - t1);
    samples.toPatchesMs.push(t3 - t2);
    samples.stringifyMs.push(t4 - t3);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  return {
    parseMs: median(samples.parseMs),
    validateMs: median(samples.validateMs),
    toPatchesMs: median(samples.toPatchesMs),
    stringifyMs: median(samples.stringifyMs),
  };
}

// ---------------------------------------------------------------------------

export async function run(opts: BenchOptions): Promise<void> {
  const { log } = opts;
  const total = opts.flags.contacts ?? DEFAULT_CONTACTS;
  const cores = availableParallelism();
  log(`bulk-upsert: ${fmt(total, 0)} contacts, ${fmt(BATCH, 0)} per batch, ${IN_FLIGHT} in flight (--duration and --connections do not apply)`);

  const genStarted = performance.now();
  const bodies: Record<Pass, Batch[]> = { insert: makeBatches('user', total, 'insert'), update: makeBatches('user', total, 'update') };
  const warmupCount = Math.min(WARMUP_BATCHES, bodies.insert.length) * BATCH;
  const warmup: Record<Pass, Batch[]> = { insert: makeBatches('warm', warmupCount, 'insert'), update: makeBatches('warm', warmupCount, 'update') };
  const bodyBytes = bodies.insert.reduce((n, b) => n + b.body.length, 0) / bodies.insert.length;
  log(
    `bulk-upsert: generated ${fmt(bodies.insert.length * 2, 0)} request bodies in ${fmt((performance.now() - genStarted) / 1000, 1)} s ` +
      `(${fmt(bodyBytes / 1024)} KiB per full batch)`,
  );

  // PostgreSQL's CPU is measured when it runs here: its postmaster is then the
  // parent of our backend.
  const pg = await opts.postgres();
  const probeDb = await pg.createDatabase();
  const { rows } = await probeDb.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const postmaster = localPostmaster(rows[0].pid);
  await probeDb.drop();
  // The contacts statement alone: the one upsertContacts() runs, without the
  // events it also writes, in its text for the first (a full) batch: a small
  // batch's text limits its input to its size (src/contacts/queries.ts), a full
  // one's does not, so it serves the last, shorter batch too.
  const upsertSql = upsertStatement('', parseBody(bodies.insert[0]!).patches, Infinity, false).sql;
  const localPostgres = postmaster !== undefined;
  const ctx: Ctx = { opts, pg, postmaster, upsertSql };

  const results: PathResult[] = [];
  for (const path of ['api', 'baseline', 'raw'] as const) results.push(await runPath(ctx, path, bodies, warmup));
  const stages = measureStages(bodies.insert[0].body);

  const by = (path: Path, pass: Pass) => results.find((r) => r.path === path)!.passes[pass];
  const ratio = (pass: Pass, base: Path) => by('api', pass).contactsPerSec / by(base, pass).contactsPerSec;
  const perBatchMs = (s: number | undefined, r: PassResult) => (s === undefined ? '-' : fmt((s * 1000) / r.batches, 1));
  const all = results.flatMap((r) => PASSES.map((p) => r.passes[p]));
  const yes = (ok: boolean) => (ok ? 'met' : 'NOT met');

  const out: string[] = [];
  out.push(
    `bulk-upsert: ${fmt(total, 0)} contacts (every field filled), ${fmt(BATCH, 0)} per request, ${IN_FLIGHT} in flight, first inserted then updated; ` +
      `each path on its own fresh database after an unmeasured warm-up; ${cores} cores; PostgreSQL: ${pg.source}`,
    '',
    table(
      ['pass', 'API contacts/s', 'baseline contacts/s', 'API ÷ baseline', 'raw SQL contacts/s', 'API ÷ raw', 'API p50 ms', 'API p99 ms'],
      PASSES.map((p) => [
        p,
        by('api', p).contactsPerSec,
        by('baseline', p).contactsPerSec,
        fmt(ratio(p, 'baseline'), 3),
        by('raw', p).contactsPerSec,
        fmt(ratio(p, 'raw'), 3),
        fmt(by('api', p).p50Ms, 1),
        fmt(by('api', p).p99Ms, 1),
      ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
    '',
    `baseline: JSON.parse + toPatches + upsertContacts (the UPSERT statement, which also writes the events, and their jobs) in a Kysely transaction, in this process; ` +
      `raw SQL: the UPSERT statement alone, without the events.`,
    `goals: API ÷ baseline ≥ ${GOAL_RATIO}: ${PASSES.map((p) => `${p} ${fmt(ratio(p, 'baseline'), 2)} (${yes(ratio(p, 'baseline') >= GOAL_RATIO)})`).join(', ')}; ` +
      `API ≥ ${fmt(GOAL_API_PER_SEC)} contacts/s: ${PASSES.map((p) => `${p} ${fmt(by('api', p).contactsPerSec)} (${yes(by('api', p).contactsPerSec >= GOAL_API_PER_SEC)})`).join(', ')}`,
    '',
    `where the time goes: CPU ms per ${fmt(BATCH, 0)}-contact batch, by process: app = the API server; bench = this process (for API ` +
      `the load generator, for baseline and raw SQL all the JavaScript); postgres = the benchmarked server's processes; other = the rest of the ` +
      `machine's busy CPU (other processes, kernel threads). Ceiling = contacts/s the server side (app or bench, plus postgres) ` +
      `would reach with all ${cores} cores to itself at this CPU cost.`,
    table(
      ['path', 'pass', 'contacts/s', 'wall s', 'p50 ms', 'p99 ms', 'app', 'bench', 'postgres', 'other', 'cores busy', 'ceiling', 'WAL MB', 'checkpoints'],
      all.map((r) => {
        const used = (r.cpuS.app ?? 0) + r.cpuS.bench + (r.cpuS.postgres ?? 0);
        const other = r.machineBusyS === undefined || r.cpuS.postgres === undefined ? undefined : Math.max(0, r.machineBusyS - used);
        const server = (r.path === 'api' ? (r.cpuS.app ?? 0) : r.cpuS.bench) + (r.cpuS.postgres ?? 0);
        return [
          LABEL[r.path],
          r.pass,
          r.contactsPerSec,
          fmt(r.wallS, 2),
          fmt(r.p50Ms, 1),
          fmt(r.p99Ms, 1),
          perBatchMs(r.cpuS.app, r),
          perBatchMs(r.cpuS.bench, r),
          perBatchMs(r.cpuS.postgres, r),
          perBatchMs(other, r),
          r.machineBusyS === undefined ? '-' : fmt(r.machineBusyS / r.wallS, 2),
          r.cpuS.postgres === undefined ? '-' : fmt((cores * r.contacts) / server, 0),
          fmt(r.walBytes / 2 ** 20, 0),
          r.checkpoints === undefined ? '-' : fmt(r.checkpoints, 0),
        ];
      }),
      ['left', 'left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  const noisy = all.filter((r) => {
    if (r.machineBusyS === undefined || r.cpuS.postgres === undefined) return false;
    const used = (r.cpuS.app ?? 0) + r.cpuS.bench + r.cpuS.postgres;
    return r.machineBusyS - used > 0.1 * r.machineBusyS;
  });
  if (noisy.length) {
    out.push(
      `note: other processes used over 10% of the machine's busy CPU during ${noisy.map((r) => `${LABEL[r.path]} ${r.pass}`).join(', ')}: ` +
        'the machine was not quiet, so contacts/s and ratios there are disturbed (the CPU ms per batch much less so).',
    );
  }
  if (!localPostgres) out.push('(PostgreSQL is not local: its CPU is not measured)');
  const q = (p: Pass) => by('baseline', p).queryMsPerBatch ?? {};
  out.push(
    '',
    `baseline, wall ms per batch by query (from Kysely's log; ${IN_FLIGHT} in flight, so waits for a CPU are included): ` +
      PASSES.map((p) => `${p}: ${Object.entries(q(p)).map(([k, ms]) => `${k} ${fmt(ms, 1)}`).join(', ')}`).join('; '),
    `UPSERT's lookup of existing rows as planned before → after each pass: ` +
      all.map((r) => `${LABEL[r.path]} ${r.pass} ${r.plan.before === r.plan.after ? r.plan.before : `${r.plan.before} → ${r.plan.after}`}`).join('; '),
    ...(all.some((r) => r.plan.before !== 'index lookups' || r.plan.after !== 'index lookups')
      ? [
          '  (anything but index lookups reads all of the team\'s rows on every batch, so that batch cost grows with the team: ' +
            'the planner does this while the statistics still see the team as small, e.g. during a big import)',
        ]
      : []),
    `app-side JS per batch, measured alone in this process (median of 20): JSON.parse ${fmt(stages.parseMs, 2)} ms, ` +
      `schema validation ${fmt(stages.validateMs, 2)} ms, toPatches ${fmt(stages.toPatchesMs, 2)} ms, ` +
      `JSON.stringify(patches) ${fmt(stages.stringifyMs, 2)} ms (body ${fmt(bodyBytes / 1024)} KiB)`,
    `rows at the end (checked): ${results.map((r) => `${LABEL[r.path]}: ${fmt(r.rows.contacts, 0)} contacts, ${fmt(r.rows.events, 0)} events, ${fmt(r.rows.updatedContacts, 0)} updated`).join('; ')}`,
  );
  console.log(out.join('\n') + '\n');

  const figures = (r: PassResult) => ({
    contactsPerSec: round(r.contactsPerSec, 1),
    wallS: round(r.wallS),
    p50Ms: round(r.p50Ms),
    p99Ms: round(r.p99Ms),
    meanMs: round(r.meanMs),
    maxMs: round(r.maxMs),
    cpuS: Object.fromEntries(Object.entries(r.cpuS).filter(([, v]) => v !== undefined).map(([k, v]) => [k, round(v!)])),
    plan: r.plan,
    machineBusyS: r.machineBusyS === undefined ? null : round(r.machineBusyS),
    walBytes: r.walBytes,
    checkpoints: r.checkpoints ?? null,
    ...(r.queryMsPerBatch ? { queryMsPerBatch: Object.fromEntries(Object.entries(r.queryMsPerBatch).map(([k, v]) => [k, round(v)])) } : {}),
  });
  console.log(
    JSON.stringify({
      bench: 'bulk-upsert',
      route: `POST ${ROUTE}`,
      contacts: total,
      batch: BATCH,
      inFlight: IN_FLIGHT,
      warmupBatches: warmup.insert.length,
      bodyBytes: Math.round(bodyBytes),
      database: pg.source,
      localPostgres,
      cores,
      node: process.version,
      ratio: Object.fromEntries(PASSES.map((p) => [p, { baseline: round(ratio(p, 'baseline'), 4), raw: round(ratio(p, 'raw'), 4) }])),
      results: Object.fromEntries(results.map((r) => [r.path, Object.fromEntries(PASSES.map((p) => [p, figures(r.passes[p])]))])),
      stagesMsPerBatch: Object.fromEntries(Object.entries(stages).map(([k, v]) => [k, round(v)])),
      rows: Object.fromEntries(results.map((r) => [r.path, r.rows])),
    }),
  );
}
