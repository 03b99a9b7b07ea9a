// `npm run bench -- ping`: the cost of the app's request pipeline (request id,
// API-key auth via the key cache, rate limiter, metrics, error handling,
// response schema) on its cheapest route, GET /public/v1/ping, against a bare
// Fastify server answering {"ok":true} on the same route.
//
// Both servers run in their own child process, started the same way (lib/
// server.ts) with the node flags of `npm start` (the app as deployed, and the
// bare server on the same runtime settings, so the ratio is the app's code),
// and get the same requests (with the same x-api-key header) from autocannon
// in this process with the same connections and duration. Order:
// one unmeasured warm-up run each, then interleaved measured rounds bare, app,
// bare, app, so that drift on a shared machine hits both alike; for each server
// the round with the most req/s is its result, and its p99 comes from that same
// round (every round is in the JSON line).
//
// With REDIS_URL in the environment a third server is measured in the same
// rounds: the app with its rate-limit counters in that Redis, as API processes
// that share a limit run (src/http/rate-limit-store.ts).
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { assertClean, measure, type LoadOptions, type LoadResult } from './lib/load.ts';
import { scriptNodeFlags } from './lib/node-flags.ts';
import { fmt, round, table } from './lib/report.ts';
import { startServer, type ServerProcess } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';

const ROUTE = '/public/v1/ping';
const BODY = '{"ok":true}';
const ROUNDS = 2;
/** Warm-up seconds per server (JIT, key cache, pool connection): not measured. */
const warmupSeconds = (duration: number) => Math.min(3, Math.max(1, Math.round(duration / 3)));

const ms = (x: number) => fmt(x, 3);
const pct = (x: number | undefined) => (x === undefined ? '-' : `${Math.round(x * 100)}%`);

type Target = { label: 'bare' | 'app' | 'app+redis'; server: ServerProcess };
type Round = { round: number; server: Target['label'] } & LoadResult;

export async function run(opts: BenchOptions): Promise<void> {
  const { connections, duration, log } = opts;

  // A fresh database with one team and key, as the tests do with makeTeam().
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const team = await createTeam(database.db, 'Bench team');
  const { key } = await createApiKey(database.db, team.id, 'bench key');

  const bare = await startServer('bare', {}, { log, execArgv: scriptNodeFlags('start') });
  opts.defer(() => bare.stop());
  const appParams: AppServerParams = { databaseUrl: database.url, appSecret: database.appSecret };
  const app = await startServer('app', appParams, { log });
  opts.defer(() => app.stop());
  const targets: Target[] = [
    { label: 'bare', server: bare },
    { label: 'app', server: app },
  ];
  const redisUrl = process.env.REDIS_URL;
  if (redisUrl) {
    const appRedis = await startServer('app', { ...appParams, redisUrl }, { log });
    opts.defer(() => appRedis.stop());
    targets.push({ label: 'app+redis', server: appRedis });
  }

  const headers = { 'x-api-key': key };
  const load = (t: Target, seconds: number): LoadOptions => ({
    url: t.server.origin + ROUTE,
    connections,
    duration: seconds,
    headers,
    expectBody: BODY,
  });

  // Both must answer the benchmarked request correctly, and the app must be
  // checking the key (else we would be measuring something else).
  for (const t of targets) {
    const res = await fetch(t.server.origin + ROUTE, { headers });
    const body = await res.text();
    if (res.status !== 200 || body !== BODY) throw new Error(`${t.label}: GET ${ROUTE} answered ${res.status} ${body}`);
  }
  const unauthorised = await fetch(app.origin + ROUTE);
  await unauthorised.arrayBuffer();
  if (unauthorised.status !== 401) throw new Error(`app: GET ${ROUTE} without a key answered ${unauthorised.status}, not 401`);

  const warmup = warmupSeconds(duration);
  for (const t of targets) {
    log(`ping: warm-up ${t.label} (${warmup} s)`);
    assertClean(`${t.label} warm-up`, await measure(load(t, warmup), t.server));
  }

  const rounds: Round[] = [];
  for (let i = 1; i <= ROUNDS; i++) {
    for (const t of targets) {
      log(`ping: round ${i}/${ROUNDS}: ${t.label} (${duration} s, ${connections} connections)`);
      const r = await measure(load(t, duration), t.server);
      assertClean(`${t.label} round ${i}`, r);
      rounds.push({ round: i, server: t.label, ...r });
      log(`ping:   ${fmt(r.reqPerSec)} req/s, p99 ${ms(r.p99Ms)} ms, server CPU ${pct(r.serverCpu)}`);
    }
  }

  const best = (label: Target['label']) =>
    rounds.filter((r) => r.server === label).reduce((a, b) => (b.reqPerSec > a.reqPerSec ? b : a));
  const b = best('bare');
  const a = best('app');
  const ratio = {
    reqPerSec: a.reqPerSec / b.reqPerSec,
    p99: b.p99Ms > 0 ? a.p99Ms / b.p99Ms : null,
  };
  const withRedis = redisUrl ? best('app+redis') : undefined;

  const out: string[] = [];
  out.push(
    `ping: GET ${ROUTE}, ${connections} connections, ${duration} s per run, ` +
      `best of ${ROUNDS} interleaved rounds (${targets.map((t) => t.label).join(', ')}, and again) after a ${warmup} s warm-up each`,
    '',
    table(
      ['server', 'req/s', 'p50 ms', 'p99 ms', 'requests', 'server CPU'],
      [
        ['bare Fastify', b.reqPerSec, ms(b.p50Ms), ms(b.p99Ms), b.requests, pct(b.serverCpu)],
        ['Plover app', a.reqPerSec, ms(a.p50Ms), ms(a.p99Ms), a.requests, pct(a.serverCpu)],
        ...(withRedis
          ? [['Plover app, limits in Redis', withRedis.reqPerSec, ms(withRedis.p50Ms), ms(withRedis.p99Ms), withRedis.requests, pct(withRedis.serverCpu)]]
          : []),
      ],
      ['left', 'right', 'right', 'right', 'right', 'right'],
    ),
    '',
    `app ÷ bare: req/s ${fmt(ratio.reqPerSec, 3)}, p99 ${ratio.p99 === null ? 'n/a (bare p99 is 0)' : fmt(ratio.p99, 3)}` +
      (withRedis ? `; app with limits in Redis ÷ bare: req/s ${fmt(withRedis.reqPerSec / b.reqPerSec, 3)}` : ''),
    '',
    'all rounds:',
    table(
      ['round', 'server', 'req/s', 'p50 ms', 'p99 ms', 'server CPU'],
      rounds.map((r) => [String(r.round), r.server, r.reqPerSec, ms(r.p50Ms), ms(r.p99Ms), pct(r.serverCpu)]),
      ['right', 'left', 'right', 'right', 'right', 'right'],
    ),
  );
  // With 2 cores the load generator can be the bottleneck for the bare server:
  // then the ratio understates the app's overhead.
  if (b.serverCpu !== undefined && b.serverCpu < 0.85) {
    out.push('', `note: the bare server used ${pct(b.serverCpu)} of a core, so its req/s is probably limited by the load generator; the ratio is then an upper bound.`);
  }
  console.log(out.join('\n') + '\n');

  const figures = (r: Round) => ({
    reqPerSec: round(r.reqPerSec, 1),
    p50Ms: round(r.p50Ms),
    p99Ms: round(r.p99Ms),
    meanMs: round(r.meanMs),
    maxMs: round(r.maxMs),
    requests: r.requests,
    serverCpu: r.serverCpu === undefined ? null : round(r.serverCpu),
    round: r.round,
  });
  console.log(
    JSON.stringify({
      bench: 'ping',
      route: `GET ${ROUTE}`,
      connections,
      durationS: duration,
      warmupS: warmup,
      rounds: ROUNDS,
      order: 'interleaved, best req/s of each',
      database: pg.source,
      node: process.version,
      bare: figures(b),
      app: figures(a),
      appRedis: withRedis ? { ...figures(withRedis), ratio: round(withRedis.reqPerSec / b.reqPerSec, 4) } : null,
      ratio: { reqPerSec: round(ratio.reqPerSec, 4), p99: ratio.p99 === null ? null : round(ratio.p99, 4) },
      all: rounds.map((r) => ({ server: r.server, ...figures(r) })),
    }),
  );
}
