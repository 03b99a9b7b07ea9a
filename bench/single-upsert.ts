// `npm run bench -- single-upsert [--duration S]`: one contact per request, the
// API's most common write (the n8n node's "upsert contact").
//
// A team in a table of a few thousand contacts (SEED_OWN of its own, SEED_OTHER
// of another team's, analysed: a small installation, where a single upsert once
// read the whole table; docs/decisions.md), then, IN_FLIGHT at a time for
// --duration seconds each, after a warm-up:
//
//   API       POST /public/v1/email/contacts/upsert to the real app in its own
//             process (bench/servers/app.ts), from undici in this one: the
//             route's transaction (the upsert, its contact.saved event, the
//             contact read for the answer) plus HTTP, auth and validation. The
//             team has no campaign and no webhook, so the event gets no
//             process_events job (docs/decisions.md, "Events nobody handles
//             get no job");
//   raw SQL   the upsert statement alone (no event, no job, no transaction),
//             through pg in this process: the baseline.
//
// Half the addresses exist (updates), half are new at first; every request
// changes a field, so every one writes. Reported per path: requests/s, latency
// p50/p99, and CPU per request of the app and of PostgreSQL (a local server's
// postmaster and its children); ratio = API ÷ raw SQL requests/s.
import { sql } from 'kysely';
import { Pool as HttpPool } from 'undici';
import { toPatches, upsertStatement } from '../src/contacts/queries.ts';
import { createPool } from '../src/db/pool.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { cpuMeter, localPostmaster } from './lib/cpu.ts';
import { LatencyHistogram } from './lib/histogram.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';

const ROUTE = '/public/v1/email/contacts/upsert';
const IN_FLIGHT = 8;
const SEED_OWN = 1_000;
const SEED_OTHER = 2_000;
/** Addresses the requests cycle through: the first SEED_OWN exist. */
const ADDRESSES = 2 * SEED_OWN;
const WARMUP_S = 1;

type Result = { label: string; requests: number; seconds: number; latency: LatencyHistogram; appUs?: number; pgUs?: number };

export async function run(opts: BenchOptions): Promise<void> {
  const { log } = opts;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const { db } = database;
  const team = await createTeam(db, 'Bench team');
  const other = await createTeam(db, 'Neighbour');
  const { key } = await createApiKey(db, team.id, 'bench key');
  await sql`INSERT INTO contacts (team_id, email) SELECT ${other.id}::uuid, 'n' || g || '@other.bench.test' FROM generate_series(1, ${SEED_OTHER}::int) g`.execute(db);
  await sql`INSERT INTO contacts (team_id, email) SELECT ${team.id}::uuid, 'c' || g || '@single.bench.test' FROM generate_series(0, ${SEED_OWN - 1}::int) g`.execute(db);
  await sql`ANALYZE contacts`.execute(db);
  const { rows: backend } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
  const postmaster = localPostmaster(backend[0]!.pid);

  let seq = 0;
  const nextContact = () => {
    const i = seq++;
    return { email: `c${i % ADDRESSES}@single.bench.test`, first_name: `N${i}` };
  };

  /** `send` IN_FLIGHT at a time for `seconds`; latencies recorded when `latency` is given. */
  const load = async (send: () => Promise<void>, seconds: number, latency?: LatencyHistogram) => {
    const end = performance.now() + seconds * 1000;
    let requests = 0;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (performance.now() < end) {
        const s = performance.now();
        await send();
        latency?.record(performance.now() - s);
        requests++;
      }
    }));
    return { requests, seconds: (performance.now() - t0) / 1000 };
  };

  const measure = async (label: string, send: () => Promise<void>, pids: number[]): Promise<Result> => {
    log(`single-upsert: ${label}: warm-up ${WARMUP_S} s, then ${opts.duration} s, ${IN_FLIGHT} in flight`);
    await load(send, WARMUP_S);
    const latency = new LatencyHistogram();
    const cpu = cpuMeter(pids, postmaster);
    const r = await load(send, opts.duration, latency);
    const spent = cpu();
    const per = (s: number | undefined) => (s === undefined ? undefined : (s * 1e6) / Math.max(1, r.requests));
    return { label, ...r, latency, appUs: pids.length ? per(spent.processes[0]) : undefined, pgUs: per(spent.postgres) };
  };

  // API: the real app, in its own process.
  const params: AppServerParams = { databaseUrl: database.url, appSecret: database.appSecret };
  const app = await startServer('app', params, { log });
  opts.defer(() => app.stop());
  const http = new HttpPool(app.origin, { connections: IN_FLIGHT, pipelining: 1, keepAliveTimeout: 60_000 });
  let httpClosed: Promise<void> | undefined;
  const closeHttp = () => (httpClosed ??= http.close());
  opts.defer(closeHttp);
  const headers = { 'content-type': 'application/json', 'x-api-key': key };
  const api = await measure('API', async () => {
    const res = await http.request({ path: ROUTE, method: 'POST', headers, body: JSON.stringify(nextContact()) });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`POST ${ROUTE} answered ${res.statusCode}: ${text.slice(0, 300)}`);
  }, [app.pid]);
  await closeHttp();
  await app.stop();

  // Raw SQL: the statement alone, prepared as the app runs it (src/db/pool.ts).
  const pool = createPool(database.url, IN_FLIGHT);
  opts.defer(() => (pool.ended ? undefined : pool.end()));
  const raw = await measure('raw SQL', async () => {
    const { sql: text, params: values } = upsertStatement(team.id, toPatches([nextContact()]), Infinity, false);
    const { rows } = await pool.query<{ outcome: string }>(text, values);
    if (!rows.some((r) => r.outcome === 'created' || r.outcome === 'updated')) throw new Error('raw SQL: the upsert wrote nothing');
  }, []);
  await pool.end();

  const rate = (r: Result) => r.requests / r.seconds;
  const us = (x: number | undefined) => (x === undefined ? '-' : fmt(x, 0));
  process.stdout.write(
    `\nsingle upsert: one contact per request, ${IN_FLIGHT} in flight, ${opts.duration} s per path, ` +
      `a table of ${fmt(SEED_OWN + SEED_OTHER, 0)} contacts (${fmt(SEED_OWN, 0)} of the team's), analysed\n` +
      table(
        ['path', 'requests/s', 'p50 ms', 'p99 ms', 'requests', 'app CPU µs/req', 'PostgreSQL CPU µs/req'],
        [api, raw].map((r) => [r.label, fmt(rate(r), 0), fmt(r.latency.percentileMs(50), 2), fmt(r.latency.percentileMs(99), 2), r.requests, us(r.appUs), us(r.pgUs)]),
        ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
      ) +
      `\nAPI ÷ raw SQL: requests/s ${fmt(rate(api) / rate(raw), 3)}\n`,
  );
  console.log(JSON.stringify({
    bench: 'single-upsert', inFlight: IN_FLIGHT, durationS: opts.duration, contacts: SEED_OWN + SEED_OTHER,
    api: { perSec: rate(api), p50Ms: api.latency.percentileMs(50), p99Ms: api.latency.percentileMs(99), appCpuUs: api.appUs, pgCpuUs: api.pgUs },
    raw: { perSec: rate(raw), p50Ms: raw.latency.percentileMs(50), p99Ms: raw.latency.percentileMs(99), pgCpuUs: raw.pgUs },
    ratio: rate(api) / rate(raw),
  }));
}
