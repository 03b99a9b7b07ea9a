// `npm run bench -- webhooks-scale`
//
// Webhook delivery throughput with 1 and with 2 worker processes (`node
// src/worker.ts`, as deployed) on one database, against the benchmark receiver
// in its own process (a fresh one per run, given that run's webhook secret: it
// verifies every signature and answers 401 to a bad one, 404 off /hook/<id>). Per run: the workers are started and idle, then 20,000
// deliveries are queued in one transaction (one NOTIFY wakes every dispatcher);
// throughput = deliveries / time from that commit until all are `success`.
// Ratio = 2 workers / 1 worker. Also checks that no envelope was delivered twice.
//
// On a machine with fewer cores than processes (receiver, PostgreSQL and the
// workers) the second worker competes for the same CPU: the ratio then shows
// that the dispatchers do not get in each other's way, not a doubling.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { loadConfig } from '../src/config.ts';
import { createTeam } from '../src/teams/queries.ts';
import { enqueueDeliveries } from '../src/webhooks/deliveries.ts';
import { createWebhook, openSecret, webhookSecretBox } from '../src/webhooks/queries.ts';
import { fmt, round, table } from './lib/report.ts';
import { scriptNodeFlags } from './lib/node-flags.ts';
import { GOAL_RSS_MIB, mibs, rssMaxMeter } from './lib/rss.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { ReceiverParams } from './servers/receiver.ts';

const N = 20_000;
const root = join(import.meta.dirname, '..');

export async function run(opts: BenchOptions): Promise<void> {
  const pgServer = await opts.postgres();

  const measure = async (workers: number): Promise<{ perSecond: number; count: number; unique: number; rssMax: number[] }> => {
    // A fresh database per run: the same empty queue and table for both.
    const database = await pgServer.createDatabase();
    opts.defer(() => database.drop());
    const env = {
      ...process.env,
      DATABASE_URL: database.url,
      APP_SECRET: database.appSecret,
      ALLOWED_PRIVATE_TARGETS: '127.0.0.1',
      LOG_LEVEL: 'silent',
    };
    const config = loadConfig(env);
    const { db } = database;
    const team = await createTeam(db, 'bench');
    const box = webhookSecretBox(config.appSecret);
    const hook = await createWebhook(db, box, team.id, { url: 'http://127.0.0.1/', events: ['email.contact.saved'] });
    const receiver = await startServer('receiver', { secrets: { [hook.id]: openSecret(box, hook) } } satisfies ReceiverParams, { log: opts.log });
    opts.defer(() => receiver.stop());
    await sql`UPDATE webhooks SET url = ${`${receiver.origin}/hook/${hook.id}`} WHERE id = ${hook.id}`.execute(db);
    const stats = async () => (await (await fetch(`${receiver.origin}/stats`)).json()) as { count: number; bad: number; unique: number };
    const { rows: events } = await sql<{ id: string }>`
      INSERT INTO events (team_id, name, payload)
      SELECT ${team.id}, 'contact.saved', jsonb_build_object('contact_id', gen_random_uuid(), 'email', 'c' || i || '@bench.example.com',
        'first_name', 'Ada', 'last_name', 'Lovelace', 'created_at', now(), 'updated_at', now())
      FROM generate_series(1, ${N}) AS i RETURNING id`.execute(db);

    const children: ChildProcess[] = [];
    const kill = () => children.forEach((c) => c.exitCode === null && c.kill('SIGKILL'));
    opts.defer(kill);
    for (let i = 0; i < workers; i++) {
      children.push(spawn(process.execPath, [...scriptNodeFlags('worker'), 'src/worker.ts'], { cwd: root, env, stdio: ['ignore', 'ignore', 'inherit'] }));
    }
    // Idle and listening: each has written its heartbeat.
    for (;;) {
      const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM worker_processes`.execute(db);
      if (rows[0]!.n >= workers) break;
      if (children.some((c) => c.exitCode !== null)) throw new Error('a worker process exited');
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 500)); // LISTEN set up after the heartbeat
    opts.log(`${workers} worker(s): queueing ${N} deliveries`);
    const rss = rssMaxMeter(children.map((c) => c.pid!));
    const started = performance.now();
    await enqueueDeliveries(db, events); // one transaction, one NOTIFY
    for (const deadline = Date.now() + 300_000; ;) {
      const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'success'`.execute(db);
      if (rows[0]!.n >= N) break;
      if (Date.now() > deadline) {
        // A failing receiver retries on the schedule: say why rather than wait for hours.
        const { rows: why } = await sql<{ last_error: string | null; n: number }>`
          SELECT last_error, count(*)::int AS n FROM webhook_deliveries WHERE status <> 'success' GROUP BY 1 ORDER BY 2 DESC LIMIT 3`.execute(db);
        throw new Error(`${N - rows[0]!.n} deliveries not delivered after 300 s: ${JSON.stringify(why)}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    const ms = performance.now() - started;
    const rssMax = rss();
    kill();
    await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : Promise.resolve())));
    const s = await stats();
    await receiver.stop();
    await database.drop();
    if (s.bad > 0) throw new Error(`the receiver refused ${s.bad} signatures`);
    return { perSecond: N / (ms / 1000), count: s.count, unique: s.unique, rssMax };
  };

  const one = await measure(1);
  const two = await measure(2);
  console.log(`\nwebhooks-scale: ${N} queued deliveries, WEBHOOK_CONCURRENCY ${loadConfig({ ...process.env, DATABASE_URL: undefined, APP_SECRET: undefined }).webhookConcurrency} per worker`);
  console.log(
    table(
      ['worker processes', 'deliveries/s', 'ratio', 'requests', 'envelopes', 'RSS max MiB per worker'],
      [
        ['1 (baseline)', fmt(one.perSecond, 0), '1.00', String(one.count), String(one.unique), mibs(one.rssMax)],
        ['2', fmt(two.perSecond, 0), fmt(round(two.perSecond / one.perSecond, 2), 2), String(two.count), String(two.unique), mibs(two.rssMax)],
      ],
      ['left', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  if (one.count !== N || two.count !== N) console.log('warning: some envelope was delivered more than once (or not at all)');
  const worst = Math.max(...one.rssMax, ...two.rssMax);
  console.log(`goal: worker RSS < ${GOAL_RSS_MIB} MiB under load: ${worst < GOAL_RSS_MIB ? 'met' : 'MISSED'} (${fmt(worst, 0)} MiB)`);
}
