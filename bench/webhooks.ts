// `npm run bench -- webhooks [--deliveries <n>] [--duration <s>]`
//
// Two measurements against a receiver in its own process (bench/servers/receiver.ts):
//
//   throughput  N deliveries (default 20,000) already queued; the dispatcher of
//               one worker sends them all (claim in batches, sign, POST, record
//               each attempt). Baseline: the same N compact bodies POSTed by raw
//               undici at the same concurrency with precomputed headers (no
//               database, no signing). Ratio = dispatcher / raw.
//   latency     a steady 500 events/s emitted for --duration seconds through
//               emit() (event row + process_events job in one transaction), with
//               a full worker running (graphile-worker fan-out + dispatcher);
//               latency = arrival at the receiver - the event's timestamp.
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import pino from 'pino';
import { Agent, request } from 'undici';
import { startWorker } from '../src/background.ts';
import { loadConfig } from '../src/config.ts';
import { emit } from '../src/events/emit.ts';
import { createTeam } from '../src/teams/queries.ts';
import { enqueueDeliveries } from '../src/webhooks/deliveries.ts';
import { WebhookDispatcher } from '../src/webhooks/dispatcher.ts';
import { createWebhook, webhookSecretBox } from '../src/webhooks/queries.ts';
import { fmt, round, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';

type Stats = { count: number; unique: number; p50: number | null; p99: number | null; max: number | null };

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags.deliveries ?? 20_000;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const receiver = await startServer('receiver', {}, { log: opts.log });
  opts.defer(() => receiver.stop());
  const stats = async (): Promise<Stats> => (await (await fetch(`${receiver.origin}/stats`)).json()) as Stats;
  const reset = () => fetch(`${receiver.origin}/reset`, { method: 'POST' });
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    APP_SECRET: database.appSecret,
    WEBHOOK_ALLOWED_TARGETS: '127.0.0.1',
    LOG_LEVEL: 'silent',
  });
  const { db, pool } = database;
  const team = await createTeam(db, 'bench');
  await createWebhook(db, webhookSecretBox(config.appSecret), team.id, {
    url: `${receiver.origin}/hook`,
    events: ['email.contact.saved'],
  });

  // Queue N deliveries (set-based: events, then fan-out per 5,000).
  opts.log(`queueing ${n} deliveries`);
  const { rows: events } = await sql<{ id: string }>`
    INSERT INTO events (team_id, name, payload)
    SELECT ${team.id}, 'contact.saved', jsonb_build_object('contact_id', gen_random_uuid(), 'email', 'c' || i || '@bench.example.com',
      'first_name', 'Ada', 'last_name', 'Lovelace', 'phone', null, 'foreign_id', null, 'country_code', 'GB',
      'created_at', now(), 'updated_at', now())
    FROM generate_series(1, ${n}) AS i RETURNING id`.execute(db);
  for (let i = 0; i < events.length; i += 5_000) await enqueueDeliveries(db, events.slice(i, i + 5_000));
  const { rows: bodies } = await sql<{ payload: Record<string, unknown> }>`SELECT payload FROM webhook_deliveries`.execute(db);

  // Baseline: raw undici, same bodies, same concurrency.
  const agent = new Agent({ connections: 64 });
  opts.defer(() => agent.close());
  const concurrency = config.webhookConcurrency;
  const raw = async () => {
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < bodies.length) {
          const body = JSON.stringify(bodies[next++]!.payload);
          const res = await request(`${receiver.origin}/hook`, {
            method: 'POST',
            dispatcher: agent,
            headers: { 'content-type': 'application/json', 'x-fy-signature': 't=0,v1=0' },
            body,
          });
          await res.body.dump();
        }
      }),
    );
    return performance.now() - started;
  };
  opts.log('baseline: raw undici');
  await raw(); // warm-up: connections, JIT
  await reset();
  const rawMs = await raw();

  opts.log('dispatcher');
  await reset();
  const dispatcher = new WebhookDispatcher({ db, pool, config, log: pino({ level: 'silent' }) });
  const started = performance.now();
  await dispatcher.start();
  let dispatcherMs = 0;
  for (;;) {
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'success'`.execute(db);
    if (rows[0]!.n >= n) {
      dispatcherMs = performance.now() - started;
      break;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  await dispatcher.stop();
  const sent = await stats();

  console.log(`\nwebhooks: ${n} queued deliveries, ${concurrency} in flight`);
  console.log(
    table(
      ['path', 'deliveries/s', 'ratio'],
      [
        ['raw undici (baseline)', fmt(n / (rawMs / 1000), 0), '1.00'],
        ['dispatcher (claim, sign, POST, record)', fmt(n / (dispatcherMs / 1000), 0), fmt(round(rawMs / dispatcherMs, 2), 2)],
      ],
      ['left', 'right', 'right'],
    ),
  );
  console.log(`receiver got ${sent.count} requests for ${sent.unique} envelopes`);

  // Latency at a steady 500 events/s with a whole worker.
  await sql`DELETE FROM webhook_deliveries`.execute(db);
  await reset();
  const worker = await startWorker(pool, { db, config }, pino({ level: 'silent' }));
  const rate = 500;
  const tickMs = 20;
  const perTick = (rate * tickMs) / 1000;
  const ticks = Math.round((opts.duration * 1000) / tickMs);
  opts.log(`latency: ${rate} events/s for ${opts.duration} s`);
  const t0 = performance.now();
  for (let i = 0; i < ticks; i++) {
    await db.transaction().execute((tx) =>
      emit(
        tx,
        Array.from({ length: perTick }, (_, j) => ({
          teamId: team.id,
          name: 'contact.saved' as const,
          payload: { email: `l${i}-${j}@bench.example.com` },
        })),
      ),
    );
    const wait = t0 + (i + 1) * tickMs - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  const total = ticks * perTick;
  const deadline = Date.now() + 30_000;
  let s = await stats();
  while (s.unique < total && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    s = await stats();
  }
  await worker.stop();
  const achieved = total / ((performance.now() - t0) / 1000);
  console.log(`\nlatency at ${rate} events/s (${total} events, ${fmt(achieved, 0)}/s achieved incl. drain):`);
  console.log(
    table(
      ['delivered', 'p50 ms', 'p99 ms', 'max ms'],
      [[`${s.unique}/${total}`, String(s.p50), String(s.p99), String(s.max)]],
      ['right', 'right', 'right', 'right'],
    ),
  );
}
