// `npm run bench -- conversions [--duration S] [--listening] [--keyed]`: leads
// and sales recorded one per request, the API's ingestion of conversions (the
// n8n node's "create lead" / "create sale"), without an idempotency key (with
// --keyed, each with a key of its own).
//
// A team with a few hundred contacts, then, IN_FLIGHT at a time for --duration
// seconds each, after a warm-up:
//
//   API       POST /public/v1/email/events, lead.created and sale.created in
//             turn, to the real app in its own process (bench/servers/app.ts),
//             from undici in this one: the route's transaction (the contact,
//             the event row with its leads or sales row, the contact's
//             counters) plus HTTP, auth and validation. Without --listening the
//             team has no campaign and no webhook, so its events are recorded
//             decided and processed (docs/decisions.md, "Events nobody handles
//             get no job"); with it, a campaign lists both events (it has no
//             send, so it never sends), so they are recorded undecided for the
//             worker's decider loop (no job either; no worker runs here: they
//             wait, as the jobs they had before did).
//   raw SQL   the event row's INSERT alone (a complete row, payload included),
//             through pg in this process: the baseline.
//
// Reported per path: requests/s, latency p50/p99, and CPU per request of the
// app and of PostgreSQL (a local server's postmaster and its children); ratio =
// API ÷ raw SQL requests/s.
import { sql } from 'kysely';
import { Pool as HttpPool } from 'undici';
import { createPool } from '../src/db/pool.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { cpuMeter, localPostmaster } from './lib/cpu.ts';
import { LatencyHistogram } from './lib/histogram.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';

const ROUTE = '/public/v1/email/events';
const IN_FLIGHT = 8;
const CONTACTS = 500;
const WARMUP_S = 1;

type Result = { label: string; requests: number; seconds: number; latency: LatencyHistogram; appUs?: number; pgUs?: number };

export async function run(opts: BenchOptions): Promise<void> {
  const { log } = opts;
  const listening = opts.switches.listening === true;
  const keyed = opts.switches.keyed === true;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const { db } = database;
  const team = await createTeam(db, 'Bench team');
  const { key } = await createApiKey(db, team.id, 'bench key');
  await sql`INSERT INTO contacts (team_id, email) SELECT ${team.id}::uuid, 'c' || g || '@conversions.bench.test' FROM generate_series(0, ${CONTACTS - 1}::int) g`.execute(db);
  if (listening) {
    await sql`INSERT INTO campaigns (team_id, name, draft_data, trigger_events)
              VALUES (${team.id}::uuid, 'listener', '{}'::jsonb, ARRAY['lead.created', 'sale.created'])`.execute(db);
  }
  await sql`ANALYZE contacts`.execute(db);
  const { rows: backend } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
  const postmaster = localPostmaster(backend[0]!.pid);

  let seq = 0;
  const nextEvent = () => {
    const i = seq++;
    const key = keyed ? { idempotency_key: `order-${i}` } : {};
    return i % 2 === 0
      ? { event_name: 'lead.created', email: `c${i % CONTACTS}@conversions.bench.test`, ...key, payload: { source: 'landing' } }
      : { event_name: 'sale.created', email: `c${i % CONTACTS}@conversions.bench.test`, ...key, payload: { source: 'shop', amount: 49.9, currency: 'eur' } };
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
    log(`conversions: ${label}: warm-up ${WARMUP_S} s, then ${opts.duration} s, ${IN_FLIGHT} in flight`);
    await load(send, WARMUP_S);
    const latency = new LatencyHistogram();
    const cpu = cpuMeter(pids, postmaster);
    const r = await load(send, opts.duration, latency);
    const spent = cpu();
    const per = (s: number | undefined) => (s === undefined ? undefined : (s * 1e6) / Math.max(1, r.requests));
    return { label, ...r, latency, appUs: pids.length ? per(spent.processes[0]) : undefined, pgUs: per(spent.postgres) };
  };

  const params: AppServerParams = { databaseUrl: database.url, appSecret: database.appSecret };
  const app = await startServer('app', params, { log });
  opts.defer(() => app.stop());
  const http = new HttpPool(app.origin, { connections: IN_FLIGHT, pipelining: 1, keepAliveTimeout: 60_000 });
  let httpClosed: Promise<void> | undefined;
  const closeHttp = () => (httpClosed ??= http.close());
  opts.defer(closeHttp);
  const headers = { 'content-type': 'application/json', 'x-api-key': key };
  const api = await measure('API', async () => {
    const res = await http.request({ path: ROUTE, method: 'POST', headers, body: JSON.stringify(nextEvent()) });
    const text = await res.body.text();
    if (res.statusCode !== 202) throw new Error(`POST ${ROUTE} answered ${res.statusCode}: ${text.slice(0, 300)}`);
  }, [app.pid]);
  await closeHttp();
  await app.stop();
  // Checked: every request wrote its event and its row.
  const { rows: [written] } = await sql<{ events: number; leads: number; sales: number; jobs: number }>`
    SELECT (SELECT count(*)::int FROM events WHERE team_id = ${team.id}::uuid AND name IN ('lead.created', 'sale.created')) AS events,
           (SELECT count(*)::int FROM leads WHERE team_id = ${team.id}::uuid) AS leads,
           (SELECT count(*)::int FROM sales WHERE team_id = ${team.id}::uuid) AS sales,
           (SELECT count(*)::int FROM graphile_worker._private_jobs) AS jobs`.execute(db);
  if (written!.events !== written!.leads + written!.sales) throw new Error(`conversions: ${written!.events} events but ${written!.leads} leads and ${written!.sales} sales`);

  const pool = createPool(database.url, IN_FLIGHT);
  opts.defer(() => (pool.ended ? undefined : pool.end()));
  const contactIds = (await sql<{ id: string }>`SELECT id FROM contacts WHERE team_id = ${team.id}::uuid`.execute(db)).rows.map((r) => r.id);
  const raw = await measure('raw SQL', async () => {
    const e = nextEvent();
    await pool.query({
      name: 'conversions-raw',
      text: `INSERT INTO events (team_id, name, contact_id, payload, occurred_at, input, processed_at, decided_at)
             VALUES ($1, $2, $3, $4::jsonb, now(), $5::jsonb, now(), now())`,
      values: [team.id, e.event_name, contactIds[seq % contactIds.length], JSON.stringify({ ...e.payload, email: e.email, created_at: new Date().toISOString() }), JSON.stringify(e.payload)],
    });
  }, []);
  await pool.end();

  const rate = (r: Result) => r.requests / r.seconds;
  const us = (x: number | undefined) => (x === undefined ? '-' : fmt(x, 0));
  process.stdout.write(
    `\nconversions: one lead or sale per request, ${keyed ? 'each with its own idempotency key' : 'no idempotency key'}, ${IN_FLIGHT} in flight, ${opts.duration} s per path, ` +
      `${listening ? 'a campaign listening (a process_events job per event)' : 'nothing listening (no jobs)'}\n` +
      table(
        ['path', 'requests/s', 'p50 ms', 'p99 ms', 'requests', 'app CPU µs/req', 'PostgreSQL CPU µs/req'],
        [api, raw].map((r) => [r.label, fmt(rate(r), 0), fmt(r.latency.percentileMs(50), 2), fmt(r.latency.percentileMs(99), 2), r.requests, us(r.appUs), us(r.pgUs)]),
        ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
      ) +
      `\nAPI ÷ raw SQL: requests/s ${fmt(rate(api) / rate(raw), 3)}; checked: ${written!.leads} leads and ${written!.sales} sales with their events, ${written!.jobs} jobs waiting\n`,
  );
  console.log(JSON.stringify({
    bench: 'conversions', inFlight: IN_FLIGHT, durationS: opts.duration, listening, keyed,
    api: { perSec: rate(api), p50Ms: api.latency.percentileMs(50), p99Ms: api.latency.percentileMs(99), appCpuUs: api.appUs, pgCpuUs: api.pgUs },
    raw: { perSec: rate(raw), p50Ms: raw.latency.percentileMs(50), p99Ms: raw.latency.percentileMs(99), pgCpuUs: raw.pgUs },
    ratio: rate(api) / rate(raw),
  }));
}
