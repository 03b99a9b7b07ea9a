// `npm run bench -- api-scale [--api-scale-contacts N]`
//
// Bulk-upsert throughput with 1 and with 2 API processes (the real app,
// bench/servers/app.ts, as `npm start` builds it without its worker) on one
// database: N new contacts (default 100,000) in 1,000-contact requests, 4 in
// flight per process (a deployment adds load with its processes), requests
// spread round-robin, each run on a fresh database. Ratio = 2 processes / 1.
// Where the time goes: CPU seconds of the API processes, of PostgreSQL's
// processes (when local) and of the machine over each run, so the report says
// which saturates first. Every request's summary is checked (all created).
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { Pool as HttpPool } from 'undici';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { cpuMeter, localPostmaster } from './lib/cpu.ts';
import { fmt, round, table } from './lib/report.ts';
import { GOAL_RSS_MIB, mibs, rssMaxMeter } from './lib/rss.ts';
import { startServer, type ServerProcess } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';

const BATCH = 1_000;
const IN_FLIGHT_PER_PROCESS = 4;
const ROUTE = '/public/v1/email/contacts/bulk-upsert';

type Run = { processes: number; perSecond: number; apiCpu?: number; pgCpu?: number; machineBusy?: number; seconds: number; rssMax: number[] };

function body(run: number, batch: number): string {
  const contacts = Array.from({ length: BATCH }, (_, j) => {
    const i = batch * BATCH + j;
    return {
      email: `r${run}.c${i}@example${i % 100}.com`, first_name: `First${i}`, last_name: `Last${i}`,
      tags: ['imported', `cohort-${i % 12}`], custom_str_1: `plan-${i % 7}`, custom_int_1: i,
    };
  });
  return JSON.stringify({ contacts });
}

export async function run(opts: BenchOptions): Promise<void> {
  const total = opts.flags['api-scale-contacts'] ?? 100_000;
  const batches = Math.max(1, Math.round(total / BATCH));
  const pgServer = await opts.postgres();

  const measure = async (processes: number): Promise<Run> => {
    const database = await pgServer.createDatabase();
    opts.defer(() => database.drop());
    const team = await createTeam(database.db, 'bench');
    const key = (await createApiKey(database.db, team.id, 'bench key')).key;
    const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(database.db);
    const postmaster = localPostmaster(rows[0]!.pid);
    const params: AppServerParams = { databaseUrl: database.url, appSecret: database.appSecret };
    const apps: ServerProcess[] = [];
    for (let i = 0; i < processes; i++) {
      // With `npm start`'s node flags: the API process as deployed.
      const app = await startServer('app', params, { log: opts.log });
      opts.defer(() => app.stop());
      apps.push(app);
    }
    const clients = apps.map((a) => new HttpPool(a.origin, { connections: IN_FLIGHT_PER_PROCESS, keepAliveTimeout: 60_000 }));
    let closing: Promise<unknown> | undefined;
    const closeClients = () => (closing ??= Promise.all(clients.map((c) => c.close())));
    opts.defer(closeClients);
    const headers = { 'content-type': 'application/json', 'x-api-key': key };
    const post = async (client: HttpPool, text: string) => {
      const res = await client.request({ path: ROUTE, method: 'POST', headers, body: text });
      const answer = (await res.body.json()) as { summary?: { created?: number } };
      if (res.statusCode !== 200 || answer.summary?.created !== BATCH) {
        throw new Error(`bulk upsert answered ${res.statusCode}: ${JSON.stringify(answer).slice(0, 300)}`);
      }
    };
    // Warm-up (JIT, pools, key cache) on other addresses, unmeasured.
    await Promise.all(clients.map((c, i) => post(c, body(-1 - processes * 10 - i, 0))));
    const texts = Array.from({ length: batches }, (_, b) => body(processes, b));
    await sql`CHECKPOINT`.execute(database.db);

    const spent = cpuMeter(apps.map((a) => a.pid), postmaster);
    const rss = rssMaxMeter(apps.map((a) => a.pid));
    opts.log(`api-scale: ${processes} API process(es): ${batches} requests of ${BATCH} new contacts, ${IN_FLIGHT_PER_PROCESS * processes} in flight`);
    const started = performance.now();
    let next = 0;
    // One loop per in-flight slot, each bound to one process: round-robin spread.
    await Promise.all(
      Array.from({ length: IN_FLIGHT_PER_PROCESS * processes }, async (_, slot) => {
        const client = clients[slot % processes]!;
        for (let b = next++; b < batches; b = next++) await post(client, texts[b]!);
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const used = spent();
    const rssMax = rss();
    const { rows: count } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM contacts WHERE team_id = ${team.id}`.execute(database.db);
    const expected = batches * BATCH + processes * BATCH;
    if (count[0]!.n !== expected) throw new Error(`${count[0]!.n} contacts stored, ${expected} sent`);
    await closeClients();
    await Promise.all(apps.map((a) => a.stop()));
    await database.drop();
    const apiCpu = used.processes.some((x) => x === undefined) ? undefined : used.processes.reduce<number>((a, x) => a + x!, 0);
    return { processes, seconds, perSecond: (batches * BATCH) / seconds, apiCpu, pgCpu: used.postgres, machineBusy: used.machine, rssMax };
  };

  const one = await measure(1);
  const two = await measure(2);
  const share = (x: number | undefined, r: Run) => (x === undefined ? 'n/a' : `${fmt(x, 1)} (${fmt((100 * x) / r.seconds, 0)} % of a core)`);
  console.log(`\napi-scale: ${batches * BATCH} new contacts through POST ${ROUTE}, ${BATCH} a request, ${IN_FLIGHT_PER_PROCESS} in flight per API process`);
  console.log(
    table(
      ['API processes', 'contacts/s', 'ratio', 'seconds', 'CPU s: API', 'CPU s: PostgreSQL', 'CPU s: machine busy', 'RSS max MiB per API'],
      [one, two].map((r) => [
        r === one ? '1 (baseline)' : '2', fmt(r.perSecond, 0), fmt(round(r.perSecond / one.perSecond, 2), 2), fmt(r.seconds, 1),
        share(r.apiCpu, r), share(r.pgCpu, r), share(r.machineBusy, r), mibs(r.rssMax),
      ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  const worst = Math.max(...one.rssMax, ...two.rssMax);
  console.log(`goal: API RSS < ${GOAL_RSS_MIB} MiB under load: ${worst < GOAL_RSS_MIB ? 'met' : 'MISSED'} (${fmt(worst, 0)} MiB)`);
  console.log(JSON.stringify({ bench: 'api-scale', contacts: batches * BATCH, one, two, ratio: round(two.perSecond / one.perSecond, 3) }));
}
