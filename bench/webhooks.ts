// `npm run bench -- webhooks [--events <n>] [--duration <s>] [--pg-stats]`
//
// The whole delivery path against a receiver in its own process that verifies
// every signature (bench/servers/receiver.ts), with a real worker in this
// process (startWorker: graphile-worker fan-out + the delivery dispatcher):
//
//   one webhook   N events (default 20,000) emitted through emit() in
//                 transactions of 500 to a team with one subscribed webhook;
//                 deliveries/s from the first commit to the last receipt.
//   10 webhooks   N events to a team with 10 subscribed webhooks (10 N deliveries).
//   baseline      the same number of signed bodies as "one webhook" (same
//                 envelope shape and signature, computed before timing) POSTed
//                 straight from undici at WEBHOOK_CONCURRENCY; ratio = path / baseline.
//   latency       a steady 500 events/s for --duration seconds to the one-webhook
//                 team: p50/p99 from the event's commit (its timestamp) to receipt.
//
// `--parked <n>`: before anything is measured, a third team's disabled webhook
// gets a paused backlog of n parked deliveries (as the fan-out writes them),
// which stays for the whole run: compare with a run without it to see that
// parked rows cost enabled webhooks nothing (the claim never scans them).
import { createHmac, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import pino from 'pino';
import { Agent, request } from 'undici';
import { startWorker } from '../src/background.ts';
import { loadConfig } from '../src/config.ts';
import { emit, type NewEvent } from '../src/events/emit.ts';
import { createTeam } from '../src/teams/queries.ts';
import { createWebhook, openSecret, webhookSecretBox } from '../src/webhooks/queries.ts';
import { cpuMeter, localPostmaster, threadCpuMeter, type CpuSpent } from './lib/cpu.ts';
import { pgStats, statsTable, type StatementStats } from './lib/pg-stats.ts';
import { fmt, round, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { ReceiverParams } from './servers/receiver.ts';

type Stats = { count: number; bad: number; unique: number; p50: number | null; p99: number | null; max: number | null };

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags.events ?? 20_000;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    APP_SECRET: database.appSecret,
    ALLOWED_PRIVATE_TARGETS: '127.0.0.1',
    LOG_LEVEL: 'silent',
  });
  const { db, pool } = database;
  const box = webhookSecretBox(config.appSecret);
  const events = ['email.contact.saved'];
  const single = await createTeam(db, 'one webhook');
  const fan = await createTeam(db, 'ten webhooks');
  const hooks = [await createWebhook(db, box, single.id, { url: 'http://127.0.0.1/', events })];
  for (let i = 0; i < 10; i++) hooks.push(await createWebhook(db, box, fan.id, { url: 'http://127.0.0.1/', events }));
  const secrets = Object.fromEntries(hooks.map((h) => [h.id, openSecret(box, h)]));
  const receiver = await startServer('receiver', { secrets } satisfies ReceiverParams, { log: opts.log });
  opts.defer(() => receiver.stop());
  await sql`UPDATE webhooks SET url = ${receiver.origin} || '/hook/' || id`.execute(db);
  const stats = async (): Promise<Stats> => (await (await fetch(`${receiver.origin}/stats`)).json()) as Stats;
  const reset = () => fetch(`${receiver.origin}/reset`, { method: 'POST' });
  // CPU of this process (worker or undici; by thread), the receiver and a local PostgreSQL, per phase.
  const { rows: backend } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
  const postmaster = localPostmaster(backend[0]!.pid);
  const meter = () => {
    const processes = cpuMeter([process.pid, receiver.pid], postmaster);
    const threads = threadCpuMeter(process.pid);
    return () => ({ spent: processes(), threads: threads() });
  };
  const waitFor = async (unique: number, timeoutMs: number): Promise<Stats> => {
    const deadline = Date.now() + timeoutMs;
    let s = await stats();
    while (s.unique < unique && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      s = await stats();
    }
    return s;
  };
  const contactSaved = (teamId: string, i: number): NewEvent => ({
    teamId,
    name: 'contact.saved',
    payload: {
      contact_id: randomUUID(), email: `c${i}@bench.example.com`, first_name: 'Ada', last_name: 'Lovelace', phone: null,
      foreign_id: null, country_code: 'GB', created_at: new Date().toISOString(), updated_at: new Date().toISOString(),
    },
  });

  // Baseline: signed bodies of the same shape, POSTed straight from undici.
  const hook = hooks[0]!;
  const bodies = Array.from({ length: n }, (_, i) => {
    const id = randomUUID();
    const body = JSON.stringify({ id, event: 'email.contact.saved', team_id: single.id, timestamp: new Date().toISOString(), payload: contactSaved(single.id, i).payload });
    const t = Math.floor(Date.now() / 1000);
    const sig = `t=${t},v1=${createHmac('sha256', secrets[hook.id]!).update(`${t}.${body}`).digest('hex')}`;
    return { body, headers: { 'content-type': 'application/json', 'user-agent': 'bench/1.0', 'x-fy-signature': sig, 'x-fy-origin': 'webhook' } };
  });
  const agent = new Agent({ connections: 64 });
  opts.defer(() => agent.close());
  const raw = async () => {
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: config.webhookConcurrency }, async () => {
        while (next < bodies.length) {
          const b = bodies[next++]!;
          const res = await request(`${receiver.origin}/hook/${hook.id}`, { method: 'POST', dispatcher: agent, headers: b.headers, body: b.body });
          await res.body.dump();
        }
      }),
    );
    return performance.now() - started;
  };
  opts.log('baseline: raw undici (warm-up, then measured)');
  await raw();
  await reset();
  const rawCpu = meter();
  const rawMs = await raw();
  const rawSpent = rawCpu();
  const rawStats = await stats();
  if (rawStats.bad > 0) throw new Error(`receiver refused ${rawStats.bad} baseline signatures`);

  const parked = opts.flags.parked ?? 0;
  if (parked > 0) {
    const paused = await createTeam(db, 'paused webhook');
    const off = await createWebhook(db, box, paused.id, { url: 'http://127.0.0.1/', events, is_enabled: false });
    opts.log(`paused backlog: ${parked} parked deliveries`);
    await sql`
      INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, next_attempt_at, created_at)
      SELECT plover_uuid_v7(), ${paused.id}, ${off.id}, 'email.contact.saved', '{}'::json, NULL, now() - i * interval '1 second'
      FROM generate_series(1, ${parked}) i`.execute(db);
    // A backlog that has been waiting is vacuumed; without this the run measured
    // autovacuum working through the fresh rows, not the backlog.
    await sql`VACUUM ANALYZE webhook_deliveries`.execute(db);
  }
  const worker = await startWorker(pool, { db, config }, pino({ level: 'silent' }));
  opts.defer(() => worker.stop());
  const emitAll = async (teamId: string, count: number) => {
    for (let i = 0; i < count; i += 500) {
      const batch = Array.from({ length: Math.min(500, count - i) }, (_, j) => contactSaved(teamId, i + j));
      await db.transaction().execute((tx) => emit(tx, batch));
    }
  };
  // --pg-stats: PostgreSQL's time per statement over each run (bench/lib/pg-stats.ts), reset before its meters start.
  const statements = opts.switches['pg-stats'] ? await pgStats(db, opts.log) : null;
  const measure = async (label: string, teamId: string, deliveries: number) => {
    await reset();
    opts.log(`${label}: ${n} events, ${deliveries} deliveries`);
    await statements?.reset();
    const cpu = meter();
    const started = performance.now();
    await emitAll(teamId, n);
    const s = await waitFor(deliveries, 600_000);
    const ms = performance.now() - started;
    const spent = cpu();
    const top: StatementStats[] = (await statements?.top(20)) ?? [];
    if (s.unique < deliveries) throw new Error(`${label}: only ${s.unique} of ${deliveries} deliveries arrived`);
    if (s.bad > 0) throw new Error(`${label}: ${s.bad} deliveries failed signature verification`);
    return { ms, s, spent, top };
  };
  const one = await measure('one webhook', single.id, n);
  const ten = await measure('10 webhooks', fan.id, 10 * n);

  console.log(
    `\nwebhooks: ${n} events, ${config.webhookConcurrency} deliveries in flight, every signature verified by the receiver` +
      (parked > 0 ? `; a paused backlog of ${parked} parked deliveries present` : ''),
  );
  const rate = (count: number, ms: number) => count / (ms / 1000);
  const rawRate = rate(n, rawMs);
  console.log(
    table(
      ['path', 'deliveries', 'deliveries/s', 'ratio to baseline', 'repeats'],
      [
        ['raw undici, pre-signed bodies (baseline)', String(n), fmt(rawRate, 0), '1.00', '0'],
        ['events -> 1 webhook (emit, fan-out, dispatch)', String(n), fmt(rate(n, one.ms), 0), fmt(round(rate(n, one.ms) / rawRate, 2), 2), String(one.s.count - one.s.unique)],
        ['events -> 10 webhooks', String(10 * n), fmt(rate(10 * n, ten.ms), 0), fmt(round(rate(10 * n, ten.ms) / rawRate, 2), 2), String(ten.s.count - ten.s.unique)],
      ],
      ['left', 'right', 'right', 'right', 'right'],
    ),
  );
  // Where the CPU went, per delivery: on two cores shared by every process, the
  // path's rate is about the inverse of its CPU per delivery.
  const us = (s: number | undefined, count: number) => (s === undefined ? 'n/a' : fmt((s * 1e6) / count, 0));
  const cpuRow = (label: string, count: number, r: { spent: CpuSpent; threads: Map<string, number> | undefined }) => [
    label, us(r.spent.processes[0], count), us(r.threads?.get('MainThread'), count), us(r.threads?.get('V8Worker'), count),
    us(r.spent.processes[1], count), us(r.spent.postgres, count), us(r.spent.machine, count),
  ];
  console.log('\nCPU per delivery, µs (this process: the worker, or undici for the baseline; machine: every process on it):');
  console.log(
    table(
      ['path', 'this process', 'of which main thread', 'V8 platform threads', 'receiver', 'PostgreSQL', 'machine'],
      [cpuRow('raw undici (baseline)', n, rawSpent), cpuRow('1 webhook', n, one.spent), cpuRow('10 webhooks', 10 * n, ten.spent)],
      ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  );

  if (statements) {
    for (const [label, r, count] of [['1 webhook', one, n], ['10 webhooks', ten, 10 * n]] as const) {
      console.log(`\n${label}: PostgreSQL's time per statement (pg_stat_statements; * nested: run inside another statement, e.g. a foreign-key check, and counted in its time too), per delivery:`);
      console.log(statsTable(r.top, 'delivery', count));
    }
  }

  // Latency at a steady 500 events/s.
  await reset();
  const perSecond = 500;
  const tickMs = 20;
  const perTick = (perSecond * tickMs) / 1000;
  const ticks = Math.round((opts.duration * 1000) / tickMs);
  opts.log(`latency: ${perSecond} events/s for ${opts.duration} s`);
  const t0 = performance.now();
  for (let i = 0; i < ticks; i++) {
    await db.transaction().execute((tx) => emit(tx, Array.from({ length: perTick }, (_, j) => contactSaved(single.id, i * perTick + j))));
    const wait = t0 + (i + 1) * tickMs - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  const total = ticks * perTick;
  const s = await waitFor(total, 60_000);
  console.log(`\nlatency from event commit to receipt at ${perSecond} events/s (${total} events):`);
  console.log(
    table(['delivered', 'p50 ms', 'p99 ms', 'max ms'], [[`${s.unique}/${total}`, String(s.p50), String(s.p99), String(s.max)]], ['right', 'right', 'right', 'right']),
  );
}
