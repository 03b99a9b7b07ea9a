// `npm run bench -- campaigns [--campaign-events <n>] [--duration <s>] [--dkim none|rsa|ed25519|both] [--template-kb <n>]`
//
// The campaign engine end to end: contact.saved events in, e-mails out at an
// SMTP sink in its own process (bench/servers/smtp-sink.ts, smtp-server on
// 127.0.0.1), with a real worker (startWorker: graphile-worker running
// process_events and send_email, plus the webhook dispatcher) in this process.
//
// One team, one mail account on the sink (daily_limit 1,000,000), one template
// (personalised subject, HTML with three links, text part; with --template-kb n
// its HTML is padded to about n KiB with static newsletter blocks, each with a
// link and an image, as a real newsletter's: Gmail clips at 102 KiB), three campaigns on
// contact.saved with no cooldown and a high daily cap. Each campaign's segment
// takes the contacts of one of three domains, so every event gets three
// decisions (one send, two segment_mismatch) and sends exactly one e-mail.
// Events go through ingestEvent() (the POST /email/events path: event row,
// contact, process_events job in one transaction), to distinct contacts.
//
//   throughput  N events (default 20,000) committed with the worker stopped;
//               then the worker starts, and the clock runs until all N
//               messages are at the sink. Baseline: the same N messages, rendered
//               again with renderMessage() from the rows the engine wrote,
//               sent by nodemailer straight to the sink with the engine's
//               pooling (one pooled transport, 5 connections) and concurrency
//               (WORKER_CONCURRENCY sends in flight). Ratio = engine / baseline.
//   latency     a steady 200 events/s for --duration seconds with the worker
//               running; latency = the message's arrival at the sink - the
//               moment its event's transaction committed (both Date.now() on
//               this machine), joined by Message-ID → email_send_log → event.
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import nodemailer from 'nodemailer';
import pino from 'pino';
import { buildApp } from '../src/app.ts';
import { startWorker, type WorkerHandle } from '../src/background.ts';
import { loadConfig } from '../src/config.ts';
import { createDb, createPool } from '../src/db/pool.ts';
import { parseAllowList } from '../src/lib/net-guard.ts';
import { ingestEvent } from '../src/ingest/ingest.ts';
import { renderMessage, type RenderedMessage } from '../src/mail/message.ts';
import { closeTransports } from '../src/mail/send.ts';
import { activateDkimKey, createDkimKey, type DkimAlgorithm } from '../src/mail/dkim.ts';
import { transportOptions } from '../src/mail/transport.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { cpuMeter, localPostmaster, threadCpuMeter, type CpuSpent } from './lib/cpu.ts';
import { LatencyHistogram } from './lib/histogram.ts';
import { timeQueries } from './lib/query-time.ts';
import { pgStats, statsTable, type StatementStats } from './lib/pg-stats.ts';
import { loopDelayMeter } from './lib/loop-delay.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { Committed, IngestServerParams } from './servers/ingest.ts';
import type { Arrival } from './servers/smtp-sink.ts';

const DEFAULT_EVENTS = 20_000;
const RATE = 200; // events/s in the latency run
const TICK_MS = 20;
const WARMUP_EVENTS = 300;
const INGEST_IN_FLIGHT = 8;
const DOMAINS = ['g0.bench.test', 'g1.bench.test', 'g2.bench.test'];
const GOAL_RATIO = 0.6;
// The performance issue's goal for event commit → SMTP at 200 events/s (the engine's first goal was 1 s).
const GOAL_P99_MS = 500;
const SMTP_POOL = 5; // as src/mail/send.ts: maxConnections per account

const TEMPLATE = {
  name: 'Bench welcome',
  content_type: 'html',
  subject: 'Welcome, {{ contact.email | split: "@" | first }}: your {{ campaign.name }} starts now',
  content: `<!doctype html><html><body style="font-family:sans-serif">
<h1>Hello {{ contact.email | split: "@" | first }}</h1>
<p>Thanks for joining {{ campaign.name }}. Here is what happens next, in three short steps.</p>
<ol><li>Read <a href="https://example.com/guide?utm_source=plover&amp;utm_campaign=welcome">the guide</a>.</li>
<li>Set up <a href="https://example.com/settings">your settings</a>.</li>
<li>Say hello on <a href="https://example.com/community">the forum</a>.</li></ol>
<p>${'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(12)}</p>
<p style="font-size:12px"><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>
</body></html>`,
  alt_content: 'Hello {{ contact.email | split: "@" | first }}, thanks for joining {{ campaign.name }}: https://example.com/guide',
};

/** The template's HTML padded to about `kib` KiB with static newsletter blocks (none for 0). */
function paddedTemplate(kib: number): typeof TEMPLATE {
  if (!kib) return TEMPLATE;
  const block = (i: number) => `<table role="presentation" width="100%" cellpadding="0" cellspacing="0" style="margin:0 0 16px 0;border-collapse:collapse">
<tr><td style="padding:12px 16px;background:#f6f7f9;border-radius:6px;font-size:15px;line-height:1.5;color:#222">
<img src="https://cdn.example.com/news/${i}.png" width="560" alt="Story ${i}" style="display:block;max-width:100%">
<h2 style="margin:8px 0;font-size:18px">Story ${i}: what changed this week</h2>
<p style="margin:0 0 8px 0">${'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore. '.repeat(4)}</p>
<a href="https://example.com/news/${i}?utm_source=plover&amp;utm_medium=email" style="color:#0b5fff">Read the whole story</a>
</td></tr></table>
`;
  const end = TEMPLATE.content.indexOf('<p style="font-size:12px">');
  let blocks = '';
  for (let i = 1; TEMPLATE.content.length + blocks.length < kib * 1024; i++) blocks += block(i);
  return { ...TEMPLATE, content: TEMPLATE.content.slice(0, end) + blocks + TEMPLATE.content.slice(end) };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags['campaign-events'] ?? DEFAULT_EVENTS;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const sink = await startServer('smtp-sink', {}, { log: opts.log });
  opts.defer(() => sink.stop());
  const smtpPort = ((await (await fetch(`${sink.origin}/smtp`)).json()) as { port: number }).port;
  const sinkCount = async () => ((await (await fetch(`${sink.origin}/count`)).json()) as { count: number }).count;
  const arrivals = async () => (await (await fetch(`${sink.origin}/arrivals`)).json()) as Arrival[];
  const resetSink = () => fetch(`${sink.origin}/reset`, { method: 'POST' });

  const config = loadConfig({
    DATABASE_URL: database.url,
    APP_SECRET: database.appSecret,
    PUBLIC_URL: 'https://plover.bench.test',
    LOG_LEVEL: 'silent',
    ALLOWED_PRIVATE_TARGETS: '127.0.0.1', // the SMTP sink
    ...(process.env.WORKER_CONCURRENCY ? { WORKER_CONCURRENCY: process.env.WORKER_CONCURRENCY } : {}),
  });
  // The worker's pool, sized as openDatabase's default (20): graphile-worker
  // takes one connection per job in flight plus its listener.
  const pool = createPool(database.url, 20);
  const db = createDb(pool);
  opts.defer(async () => {
    closeTransports();
    await db.destroy().catch(() => undefined);
  });
  const silent = pino({ level: 'silent' });
  // The load generator's own pool, as the API would have in its own process:
  // events committed at 200/s must not take the worker's connections.
  const ingestPool = createPool(database.url, INGEST_IN_FLIGHT);
  const ingestDb = createDb(ingestPool);
  opts.defer(() => ingestDb.destroy().catch(() => undefined));

  // Set-up through the API (validated as a client's would be), in this process.
  const team = await createTeam(db, 'bench');
  const { key } = await createApiKey(db, team.id, 'bench');
  const { rows: accounts } = await sql<{ id: string }>`
    INSERT INTO mail_accounts (team_id, host, port, security, from_email, from_name, daily_limit)
    VALUES (${team.id}, '127.0.0.1', ${smtpPort}, 'none', 'news@bench.test', 'Bench News', 1000000) RETURNING id`.execute(db);
  const accountId = accounts[0]!.id;
  // --dkim: the account signs every message with these keys (activated without a DNS lookup).
  const dkim = opts.text.dkim ?? 'none';
  const algorithms: DkimAlgorithm[] = { none: [], rsa: ['rsa'], ed25519: ['ed25519'], both: ['rsa', 'ed25519'] }[dkim] as DkimAlgorithm[] ?? [];
  if (!['none', 'rsa', 'ed25519', 'both'].includes(dkim)) throw new Error(`--dkim: none, rsa, ed25519 or both, not ${dkim}`);
  for (const algorithm of algorithms) {
    const k = await createDkimKey(db, database.appSecret, team.id, accountId, { algorithm });
    await activateDkimKey(db, team.id, accountId, k.id, { force: true, resolveTxt: async () => [] });
  }
  opts.log(`DKIM keys of the account: ${dkim}`);
  const app = await buildApp({ config, pool, db, logger: silent });
  const post = async (url: string, payload: object) => {
    const res = await app.inject({ method: 'POST', url: `/public/v1${url}`, headers: { 'x-api-key': key }, payload });
    if (res.statusCode !== 201) throw new Error(`POST ${url}: ${res.statusCode} ${res.body}`);
    return res.json();
  };
  const template = paddedTemplate(opts.flags['template-kb'] ?? 0);
  const templateId = (await post('/email/templates', template)).template.id as string;
  for (const [i, domain] of DOMAINS.entries()) {
    await post('/email/campaigns', {
      name: `Welcome ${i + 1}`,
      events: ['contact.saved'],
      template_ids: [templateId],
      mail_account_ids: [accountId],
      from_name: 'Bench',
      event_triggered_send: { enabled: true, contact_cooldown_interval: 0, contact_daily_email_cap: 1000 },
      segment_query: { rules: [{ field: 'email', operator: 'contains', value: `@${domain}` }] },
    });
  }
  await app.close();

  const { rows: pid } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
  const postmaster = localPostmaster(pid[0]!.pid);

  /** Commits one contact.saved event per address, `inFlight` at a time; returns commit times by event id. */
  const commits = new Map<string, number>();
  const ingest = async (emails: string[], inFlight: number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next < emails.length) {
          const email = emails[next++]!;
          const { eventId } = await ingestEvent(ingestDb, team.id, { event_name: 'contact.saved', email });
          commits.set(eventId, Date.now());
        }
      }),
    );
  };
  const addresses = (prefix: string, count: number) =>
    Array.from({ length: count }, (_, i) => `${prefix}${i}@${DOMAINS[i % DOMAINS.length]}`);
  const waitForSink = async (count: number, what: string, stallMs = 60_000) => {
    let last = -1;
    let lastChange = Date.now();
    for (;;) {
      const c = await sinkCount();
      if (c >= count) return;
      if (c !== last) [last, lastChange] = [c, Date.now()];
      if (Date.now() - lastChange > stallMs) {
        const { rows } = await sql<{ status: string; n: number }>`
          SELECT status, count(*)::int AS n FROM email_send_log GROUP BY status ORDER BY status`.execute(db);
        throw new Error(`${what}: the sink got ${c} of ${count} messages, none for ${stallMs / 1000} s; send log: ${JSON.stringify(rows)}`);
      }
      await sleep(25);
    }
  };

  let worker: WorkerHandle | undefined;
  opts.defer(() => worker?.stop());
  const start = async () => (worker = await startWorker(pool, { db, config }, silent));
  const stop = async () => {
    await worker?.stop();
    worker = undefined;
  };

  // Warm-up: JIT, pools, the account's pooled SMTP transport.
  opts.log(`campaigns: warm-up (${WARMUP_EVENTS} events)`);
  await start();
  await ingest(addresses('warm', WARMUP_EVENTS), INGEST_IN_FLIGHT);
  await waitForSink(WARMUP_EVENTS, 'warm-up');
  await stop();
  await resetSink();

  // Throughput: N committed events, then the worker drains them.
  opts.log(`campaigns: committing ${fmt(n, 0)} events (worker stopped)`);
  const t0 = performance.now();
  await ingest(addresses('c', n), INGEST_IN_FLIGHT);
  const ingestS = (performance.now() - t0) / 1000;
  await sql`VACUUM ANALYZE`.execute(db);
  opts.log('campaigns: engine drains them');
  // --pg-stats: PostgreSQL's time per statement over each run (bench/lib/pg-stats.ts),
  // set up and reset before the meters and the statement timing start.
  const statements = opts.switches['pg-stats'] ? await pgStats(db, opts.log) : null;
  const PG_STATS_TOP = 20;
  await statements?.reset();
  const engineMeter = cpuMeter([process.pid, sink.pid], postmaster);
  const threads0 = threadCpuMeter(process.pid);
  const stopTiming = timeQueries();
  const t1 = performance.now();
  await start();
  await waitForSink(n, 'engine');
  const engineS = (performance.now() - t1) / 1000;
  const engineCpu = cpuCells(engineMeter());
  const engineThreads = threads0();
  const signatures = ((await (await fetch(`${sink.origin}/count`)).json()) as { signatures: number }).signatures;
  if (signatures !== n * algorithms.length) throw new Error(`--dkim ${dkim}: ${signatures} DKIM signatures at the sink, expected ${n * algorithms.length}`);
  opts.log(`campaigns: engine sent ${fmt(n, 0)} e-mails in ${fmt(engineS, 2)} s: ${fmt(n / engineS, 0)}/s (DKIM: ${dkim}, ${fmt(signatures, 0)} signatures)`);
  const queryTimes = stopTiming();
  const engineStatements: StatementStats[] = (await statements?.top(PG_STATS_TOP)) ?? [];
  const { rows: outcome } = await sql<{ decisions: number; sends: number; sent: number }>`
    SELECT (SELECT count(*)::int FROM campaign_decisions) AS decisions,
           (SELECT count(*)::int FROM campaign_decisions WHERE decision = 'send') AS sends,
           (SELECT count(*)::int FROM email_send_log WHERE status = 'sent') AS sent`.execute(db);

  // Latency at a steady rate, worker running; the events come from another
  // process (bench/servers/ingest.ts), as they would from the API.
  const source = await startServer(
    'ingest',
    { databaseUrl: database.url, teamId: team.id, poolSize: INGEST_IN_FLIGHT } satisfies IngestServerParams,
    { log: opts.log },
  );
  opts.defer(() => source.stop());
  const ingestRemote = async (emails: string[]) => {
    const res = await fetch(`${source.origin}/ingest`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ emails }),
    });
    if (!res.ok) throw new Error(`ingest: ${res.status} ${await res.text()}`);
    for (const [id, at] of (await res.json()) as Committed[]) commits.set(id, at);
  };
  await resetSink();
  await ingestRemote(addresses('warm2-', 20)); // connections, JIT
  await waitForSink(20, 'ingest warm-up');
  await resetSink();
  commits.clear();
  const ticks = Math.round((opts.duration * 1000) / TICK_MS);
  const perTick = (RATE * TICK_MS) / 1000;
  opts.log(`campaigns: latency at ${RATE} events/s for ${opts.duration} s`);
  const steady = addresses('l', ticks * perTick);
  const inflight: Promise<void>[] = [];
  await statements?.reset();
  const stopSteadyTiming = timeQueries();
  const loopDelay = loopDelayMeter(10);
  // CPU over the steady phase: this process (the worker), the ingesting process, the sink, PostgreSQL, the machine.
  const steadyCpu = cpuMeter([process.pid, source.pid, sink.pid], postmaster);
  const steadyThreads = threadCpuMeter(process.pid);
  const t2 = performance.now();
  for (let i = 0; i < ticks; i++) {
    // Open loop: a slow commit does not slow the arrival of the next events.
    inflight.push(ingestRemote(steady.slice(i * perTick, (i + 1) * perTick)));
    const wait = t2 + (i + 1) * TICK_MS - performance.now();
    if (wait > 0) await sleep(wait);
  }
  await Promise.all(inflight);
  const offeredS = (performance.now() - t2) / 1000;
  await waitForSink(steady.length, 'latency', 30_000);
  const steadyS = (performance.now() - t2) / 1000;
  const steadySpent = steadyCpu();
  const steadyByThread = steadyThreads();
  const steadyTimes = stopSteadyTiming();
  const steadyStatements: StatementStats[] = (await statements?.top(PG_STATS_TOP)) ?? [];
  const loop = loopDelay.read();
  loopDelay.stop();
  await stop();
  // Split at the decision (the engine's clock when it decided): commit → decided is
  // the decider loop's side, decided → arrival the send_email side. That one is
  // split again at the claim (the database's clock, same machine): decided →
  // claimed is the job's wait, its loading and rendering and the wait for one of
  // the account's SMTP connections; claimed → sink the claim's commit and SMTP.
  const latency = new LatencyHistogram();
  const toDecision = new LatencyHistogram();
  const toArrival = new LatencyHistogram();
  const toClaim = new LatencyHistogram();
  const claimToArrival = new LatencyHistogram();
  {
    const got = await arrivals();
    const { rows } = await sql<{ message_id: string; event_id: string; decided_at: Date; claimed_at: Date }>`
      SELECT l.message_id, l.event_id, d.decided_at, l.claimed_at FROM email_send_log l JOIN campaign_decisions d ON d.email_send_log_id = l.id
       WHERE l.message_id = ANY (${got.map((a) => a[0])}::text[])`.execute(db);
    const rowOf = new Map(rows.map((r) => [r.message_id, r]));
    for (const [messageId, at] of got) {
      const row = rowOf.get(messageId);
      const committed = commits.get(row?.event_id ?? '');
      if (!row || committed === undefined) throw new Error(`latency: message ${messageId} maps to no event of this run`);
      latency.record(at - committed);
      toDecision.record(row.decided_at.getTime() - committed);
      toArrival.record(at - row.decided_at.getTime());
      toClaim.record(row.claimed_at.getTime() - row.decided_at.getTime());
      claimToArrival.record(at - row.claimed_at.getTime());
    }
  }

  // Baseline: the throughput run's messages, rendered again, sent by nodemailer alone.
  opts.log('campaigns: baseline: rendering the same messages');
  const messages = await renderSent(db, config.publicUrl, config.appSecret!, 'c');
  if (messages.length !== n) throw new Error(`baseline: rendered ${messages.length} messages, expected ${n}`);
  const transport = nodemailer.createTransport({
    ...transportOptions({ host: '127.0.0.1', port: smtpPort, security: 'none', username: null }, null, parseAllowList(config.allowedPrivateTargets)),
    pool: true,
    maxConnections: SMTP_POOL,
  });
  opts.defer(() => transport.close());
  const blast = async (list: RenderedMessage[]) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: config.workerConcurrency }, async () => {
        while (next < list.length) await transport.sendMail(list[next++]!);
      }),
    );
  };
  await blast(messages.slice(0, WARMUP_EVENTS));
  await resetSink();
  opts.log('campaigns: baseline: nodemailer straight to the sink');
  const baselineMeter = cpuMeter([process.pid, sink.pid], postmaster);
  const t3 = performance.now();
  await blast(messages);
  await waitForSink(n, 'baseline');
  const baselineS = (performance.now() - t3) / 1000;
  const baselineCpu = cpuCells(baselineMeter());

  const o = outcome[0]!;
  const engineRate = n / engineS;
  const baselineRate = n / baselineS;
  const ratio = engineRate / baselineRate;
  console.log(`\ncampaigns: ${fmt(n, 0)} contact.saved events, 3 campaigns (one send each), one account, ` +
    `${config.workerConcurrency} jobs in flight, ${SMTP_POOL} SMTP connections, DKIM: ${dkim} (${algorithms.length} signature(s) per engine message, none on the baseline's)`);
  console.log(`(events committed through ingestEvent at ${fmt(n / ingestS, 0)}/s before the clock started; ` +
    `${fmt(o.decisions, 0)} decisions, ${fmt(o.sends, 0)} sends, ${fmt(o.sent, 0)} sent)`);
  console.log(
    table(
      ['path', 'e-mails/s', 'ratio', 'cpu s: this process', 'sink', 'postgres'],
      [
        ['nodemailer → sink (baseline)', fmt(baselineRate, 0), '1.00', ...baselineCpu.cells()],
        ['engine: worker from committed events → sink', fmt(engineRate, 0), fmt(ratio, 2), ...engineCpu.cells()],
      ],
      ['left', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  console.log(`goal: ratio >= ${GOAL_RATIO}: ${ratio >= GOAL_RATIO ? 'met' : 'MISSED'}`);
  // Where this process's CPU went, per e-mail, by thread (/proc task names):
  // the worker's event loop, V8's platform threads (GC, compiling) and the
  // untrusted pool's threads (rendering). The baseline's process does what
  // nodemailer does; the engine's main thread does that and the rest.
  const perMail = (s: number | undefined, count: number) => (s === undefined ? 'n/a' : `${fmt((s * 1e6) / count, 0)} µs`);
  const th = (name: string) => engineThreads?.get(name);
  console.log(`engine run, CPU per e-mail: this process ${perMail(engineCpu.self, n)} (main thread ${perMail(th('MainThread'), n)}, ` +
    `V8 platform threads ${perMail(th('V8Worker'), n)}, pool threads ${perMail(th('WorkerThread'), n)}), ` +
    `PostgreSQL ${perMail(engineCpu.postgres, n)}; baseline, this process: ${perMail(baselineCpu.self, n)}`);
  console.log(`\nengine run: wall time of the worker's statements (summed over connections, waits included), per e-mail:`);
  console.log(
    table(
      ['statement', 'calls/e-mail', 'ms/e-mail'],
      queryTimes.slice(0, 12).map((q) => [q.kind, fmt(q.calls / n, 2), fmt(q.ms / n, 2)]),
      ['left', 'right', 'right'],
    ),
  );
  if (statements) {
    console.log(`\nengine run: PostgreSQL's time per statement (pg_stat_statements; * nested: run inside another statement, e.g. a foreign-key check, and counted in its time too), per e-mail:`);
    console.log(statsTable(engineStatements, 'e-mail', n));
  }
  const p99 = latency.percentileMs(99);
  console.log(`\nlatency, event commit → message at the sink, ${RATE} events/s offered ` +
    `(${fmt(steady.length / offeredS, 0)}/s achieved) for ${opts.duration} s:`);
  console.log(
    table(
      ['', 'messages', 'p50 ms', 'p99 ms', 'max ms'],
      [
        ['commit → sink', `${fmt(latency.count, 0)}/${fmt(steady.length, 0)}`, fmt(latency.percentileMs(50), 0), fmt(p99, 0), fmt(latency.maxMs(), 0)],
        ...([
          ['  commit → decided', toDecision], ['  decided → sink', toArrival],
          ['    decided → claimed', toClaim], ['    claimed → sink', claimToArrival],
        ] as const).map(([label, h]) =>
          [label, '', fmt(h.percentileMs(50), 0), fmt(h.percentileMs(99), 0), fmt(h.maxMs(), 0)]),
      ],
      ['left', 'right', 'right', 'right', 'right'],
    ),
  );
  console.log(`goal: p99 < ${GOAL_P99_MS} ms: ${p99 < GOAL_P99_MS ? 'met' : 'MISSED'}`);
  {
    const m = steady.length;
    const th = (name: string) => perMail(steadyByThread?.get(name), m);
    const [worker, ingester, smtp] = steadySpent.processes;
    console.log(`latency run, CPU per event: worker ${perMail(worker, m)} (main thread ${th('MainThread')}, V8 platform threads ${th('V8Worker')}, ` +
      `pool threads ${th('WorkerThread')}), ingesting process ${perMail(ingester, m)}, sink ${perMail(smtp, m)}, PostgreSQL ${perMail(steadySpent.postgres, m)}; ` +
      `machine busy ${steadySpent.machine === undefined ? 'n/a' : fmt(steadySpent.machine / steadyS, 2)} of ${availableParallelism()} cores`);
  }
  console.log(`worker process event-loop delay (past the 10 ms timer): p50 ${fmt(loop.p50, 0)} ms, p99 ${fmt(loop.p99, 0)} ms, max ${fmt(loop.max, 0)} ms`);
  console.log(`\nlatency run: wall time of the worker's statements per event:`);
  console.log(
    table(
      ['statement', 'calls/event', 'ms/event'],
      steadyTimes.slice(0, 12).map((q) => [q.kind, fmt(q.calls / steady.length, 2), fmt(q.ms / steady.length, 2)]),
      ['left', 'right', 'right'],
    ),
  );
  if (statements) {
    console.log(`\nlatency run: PostgreSQL's time per statement (pg_stat_statements, every process's, ingestion included), per event:`);
    console.log(statsTable(steadyStatements, 'event', steady.length));
  }
}

/** Every sent message of the addresses with this prefix, rendered as the send task renders it. */
async function renderSent(db: ReturnType<typeof createDb>, publicUrl: string, appSecret: string, prefix: string) {
  const links = { publicUrl, appSecret };
  const { rows } = await sql<Record<string, any>>`
    SELECT l.id, l.open_tracking, l.click_tracking, to_jsonb(k) AS contact,
           jsonb_build_object('from_email', a.from_email, 'from_name', a.from_name) AS account,
           jsonb_build_object('key', t.id || '@' || t.updated_at, 'subject', t.subject, 'content', t.content, 'alt_content', t.alt_content) AS template,
           s.send_data,
           jsonb_build_object('name', e.name, 'occurred_at', e.occurred_at, 'payload', coalesce(e.input, e.payload)) AS event,
           jsonb_build_object('id', c.id, 'name', c.name) AS campaign
      FROM email_send_log l
      JOIN contacts k ON k.id = l.contact_id
      JOIN mail_accounts a ON a.id = l.mail_account_id
      JOIN templates t ON t.id = l.template_id
      JOIN campaign_sends s ON s.id = l.campaign_send_id
      JOIN events e ON e.id = l.event_id
      JOIN campaigns c ON c.id = l.campaign_id
     WHERE l.status = 'sent' AND l.email LIKE ${`${prefix}%`}
     ORDER BY l.created_at, l.id`.execute(db);
  // Rendered in the untrusted pool, a send batch's worth at a time as the send
  // task does (all at once would overflow the pool's queue, which refuses work past it).
  const out: RenderedMessage[] = [];
  for (let i = 0; i < rows.length; i += 50) {
    out.push(...(await Promise.all(
      rows.slice(i, i + 50).map((r) =>
        renderMessage({
          sendLogId: r.id, contact: r.contact, template: r.template, account: r.account,
          sendData: { ...r.send_data, open_tracking: r.open_tracking, click_tracking: r.click_tracking },
          event: r.event, campaign: r.campaign, links,
        }),
      ),
    )));
  }
  return out;
}

/** A throughput run's CPU seconds: this process (worker or nodemailer), the sink, PostgreSQL when it is local. */
function cpuCells(spent: CpuSpent) {
  const [self, sinkCpu] = spent.processes;
  const s = (v: number | undefined) => (v === undefined ? 'n/a' : fmt(v, 1));
  return { self, postgres: spent.postgres, cells: () => [s(self), s(sinkCpu), s(spent.postgres)] };
}
