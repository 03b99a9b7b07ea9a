// `npm run bench -- transactional [--tx-emails <n>] [--tx-batches <n>] [--duration <s>] [--connections <n>]`
//
// Transactional e-mail end to end: POST /email/emails/submit (and /batch) to
// the real API in its own process (bench/servers/app.ts), a real worker
// (startWorker: graphile-worker running send_email) in this process, an SMTP
// sink in its own process (bench/servers/smtp-sink.ts, smtp-server on
// 127.0.0.1) that records each message's Message-ID (<email id@domain>) and
// arrival time (Date.now() on this machine).
//
// One team, one mail account on the sink (daily_limit 1,000,000), one receipt
// template (Liquid variables in subject, HTML and text; no tracking, as
// transactional mail goes by default).
//
//   throughput  N submits (default 2,000), --connections (default 50) in
//               flight, worker running; the clock runs from the first submit
//               to the last message's arrival. Baseline: the same N messages,
//               rendered again with renderMessage() from the rows, sent by
//               nodemailer straight to the sink with the worker's pooling (5
//               connections per account) and concurrency (WORKER_CONCURRENCY
//               sends in flight). Ratio = path / baseline.
//   latency     100 submits/s, open loop (one every 10 ms whatever the answers
//               do), for --duration seconds; latency = arrival at the sink -
//               the moment the request was sent. Baseline: nodemailer's
//               sendMail() at the same rate, call → arrival.
//   batch       --tx-batches (default 5) requests of 500 e-mails, one after the
//               other (each once its messages are all at the sink): the
//               request's answer time, and request → the batch's last message.
//
// `--pg-stats`: PostgreSQL's own time per statement over the throughput run,
// API and worker together (bench/lib/pg-stats.ts).
import { parseAllowList } from '../src/lib/net-guard.ts';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import nodemailer from 'nodemailer';
import pino from 'pino';
import { Agent, request } from 'undici';
import { startWorker, type WorkerHandle } from '../src/background.ts';
import { loadConfig } from '../src/config.ts';
import { createDb, createPool } from '../src/db/pool.ts';
import { renderMessage, type RenderedMessage } from '../src/mail/message.ts';
import { closeTransports } from '../src/mail/send.ts';
import { transportOptions } from '../src/mail/transport.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { LatencyHistogram } from './lib/histogram.ts';
import { timeQueries } from './lib/query-time.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import { pgStats, statsTable } from './lib/pg-stats.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';
import type { Arrival } from './servers/smtp-sink.ts';

const DEFAULT_EMAILS = 2_000;
const DEFAULT_BATCHES = 5;
const BATCH_SIZE = 500;
const RATE = 100; // submits/s in the latency run
const WARMUP = 100;
const SMTP_POOL = 5; // as src/mail/send.ts: connections per account and worker

const TEMPLATE = {
  name: 'Bench receipt',
  content_type: 'html',
  subject: 'Your order {{ order_id }} is confirmed',
  content: `<!doctype html><html><body style="font-family:sans-serif">
<h1>Thanks, {{ name | default: "there" }}</h1>
<p>Order <b>{{ order_id }}</b>: {{ items | size }} items, total {{ total }}.</p>
<ul>{% for item in items %}<li>{{ item.title }} × {{ item.qty }}</li>{% endfor %}</ul>
<p>Track it at <a href="https://shop.example.com/orders/{{ order_id }}">your account</a>.</p>
<p>${'Questions? Reply to this e-mail and a person will answer. '.repeat(6)}</p>
</body></html>`,
  alt_content: 'Thanks {{ name }}: order {{ order_id }}, total {{ total }}. https://shop.example.com/orders/{{ order_id }}',
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags['tx-emails'] ?? DEFAULT_EMAILS;
  const batches = opts.flags['tx-batches'] ?? DEFAULT_BATCHES;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const sink = await startServer('smtp-sink', {}, { log: opts.log });
  opts.defer(() => sink.stop());
  const smtpPort = ((await (await fetch(`${sink.origin}/smtp`)).json()) as { port: number }).port;
  const sinkCount = async () => ((await (await fetch(`${sink.origin}/count`)).json()) as { count: number }).count;
  const arrivals = async () => (await (await fetch(`${sink.origin}/arrivals`)).json()) as Arrival[];
  const resetSink = () => fetch(`${sink.origin}/reset`, { method: 'POST' });
  const api = await startServer('app', { databaseUrl: database.url, appSecret: database.appSecret } satisfies AppServerParams, { log: opts.log });
  opts.defer(() => api.stop());

  const config = loadConfig({
    DATABASE_URL: database.url,
    APP_SECRET: database.appSecret,
    PUBLIC_URL: 'https://plover.bench.test',
    ALLOWED_PRIVATE_TARGETS: '127.0.0.1', // the SMTP sink (a public PUBLIC_URL allows no private target by default)
    LOG_LEVEL: 'silent',
    ...(process.env.WORKER_CONCURRENCY ? { WORKER_CONCURRENCY: process.env.WORKER_CONCURRENCY } : {}),
  });
  const pool = createPool(database.url, 20); // openDatabase's default
  const db = createDb(pool);
  opts.defer(async () => {
    closeTransports();
    await db.destroy().catch(() => undefined);
  });
  const team = await createTeam(db, 'bench');
  const { key } = await createApiKey(db, team.id, 'bench');
  const { rows: accounts } = await sql<{ id: string }>`
    INSERT INTO mail_accounts (team_id, host, port, security, from_email, from_name, daily_limit)
    VALUES (${team.id}, '127.0.0.1', ${smtpPort}, 'none', 'orders@bench.test', 'Bench Shop', 1000000) RETURNING id`.execute(db);
  const accountId = accounts[0]!.id;

  const agent = new Agent({ connections: opts.connections, keepAliveTimeout: 30_000 });
  // Open loop: the client must never queue a request behind slow answers.
  const openAgent = new Agent({ connections: 1_000, keepAliveTimeout: 30_000 });
  opts.defer(() => Promise.all([agent.close(), openAgent.close()]));
  const post = async (path: string, body: unknown, expect: number, dispatcher = agent): Promise<any> => {
    const res = await request(`${api.origin}/public/v1${path}`, {
      method: 'POST', dispatcher, body: JSON.stringify(body),
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
    });
    const json = await res.body.json();
    if (res.statusCode !== expect) throw new Error(`POST ${path}: ${res.statusCode} ${JSON.stringify(json)}`);
    return json;
  };
  const templateId = (await post('/email/templates', TEMPLATE, 201)).template.id as string;
  let seq = 0;
  const email = () => {
    const i = seq++;
    return {
      template_id: templateId, mail_account_id: accountId, to_email: `buyer${i}@shop.bench.test`, to_name: `Buyer ${i}`,
      variables: { name: `Buyer ${i}`, order_id: `B-${i}`, total: `${(i % 97) + 3}.50 EUR`,
        items: [{ title: 'Notebook', qty: 2 }, { title: 'Pen', qty: i % 5 + 1 }] },
    };
  };
  /** Submits one e-mail; returns its id and when the request was sent (Date.now()). */
  const submit = async (dispatcher = agent): Promise<[id: string, sentAt: number, answeredMs: number]> => {
    const at = Date.now();
    const t = performance.now();
    const { email: e } = await post('/email/emails/submit', email(), 202, dispatcher);
    return [e.id, at, performance.now() - t];
  };
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
      await sleep(20);
    }
  };
  /** Arrival time by e-mail id (the Message-ID's local part). */
  const arrivedAt = async () => new Map((await arrivals()).map(([id, at]) => [id.split('@')[0]!, at]));

  const silent = pino({ level: 'silent' });
  let worker: WorkerHandle | undefined = await startWorker(pool, { db, config }, silent);
  opts.defer(() => worker?.stop());

  opts.log(`transactional: warm-up (${WARMUP} submits)`);
  await Promise.all(Array.from({ length: WARMUP }, () => submit()));
  await waitForSink(WARMUP, 'warm-up');
  await resetSink();

  // Throughput: N submits, `connections` in flight, worker running.
  opts.log(`transactional: throughput, ${fmt(n, 0)} submits, ${opts.connections} in flight`);
  const firstId = seq;
  const statements = opts.switches['pg-stats'] ? await pgStats(db, opts.log) : null;
  await statements?.reset();
  const stopTiming = timeQueries();
  const t0 = Date.now();
  let left = n;
  await Promise.all(Array.from({ length: Math.min(opts.connections, n) }, async () => {
    while (left > 0) {
      left--;
      await submit();
    }
  }));
  const submitS = (Date.now() - t0) / 1000;
  await waitForSink(n, 'throughput');
  const pathS = (Math.max(...(await arrivals()).map((a) => a[1])) - t0) / 1000;
  const queryTimes = stopTiming();
  const statementTable = statements ? statsTable(await statements.top(15), 'e-mail', n) : null;
  const ids = Array.from({ length: n }, (_, i) => `buyer${firstId + i}@shop.bench.test`);

  // Latency at a fixed rate, open loop.
  await resetSink();
  const ticks = Math.round(opts.duration * RATE);
  opts.log(`transactional: latency at ${RATE} submits/s for ${opts.duration} s`);
  const sent = new Map<string, number>();
  const answer = new LatencyHistogram();
  const inflight: Promise<void>[] = [];
  const t1 = performance.now();
  for (let i = 0; i < ticks; i++) {
    inflight.push(submit(openAgent).then(([id, at, ms]) => {
      sent.set(id, at);
      answer.record(ms);
    }));
    const wait = t1 + ((i + 1) * 1000) / RATE - performance.now();
    if (wait > 0) await sleep(wait);
  }
  const offeredS = (performance.now() - t1) / 1000;
  await Promise.all(inflight);
  await waitForSink(ticks, 'latency', 30_000);
  const latency = new LatencyHistogram();
  for (const [id, at] of await arrivedAt()) {
    const from = sent.get(id);
    if (from === undefined) throw new Error(`latency: message ${id} is not one of this run's`);
    latency.record(at - from);
  }

  // Batches of 500, one after the other.
  const batchAnswer = new LatencyHistogram();
  const batchDone = new LatencyHistogram();
  for (let b = 0; b < batches; b++) {
    await resetSink();
    opts.log(`transactional: batch ${b + 1}/${batches} (${BATCH_SIZE} e-mails)`);
    const body = { emails: Array.from({ length: BATCH_SIZE }, email) };
    const at = Date.now();
    const t = performance.now();
    const { emails } = await post('/email/emails/batch', body, 202);
    batchAnswer.record(performance.now() - t);
    if (emails.length !== BATCH_SIZE) throw new Error(`batch: ${emails.length} answers`);
    await waitForSink(BATCH_SIZE, 'batch');
    batchDone.record(Math.max(...(await arrivals()).map((a) => a[1])) - at);
  }
  await worker.stop();
  worker = undefined;

  // Baseline: the throughput run's messages, rendered again, sent by nodemailer alone.
  opts.log('transactional: baseline: rendering the same messages');
  const messages = await renderSent(db, config.publicUrl, config.appSecret!, ids);
  if (messages.length !== n) throw new Error(`baseline: rendered ${messages.length} messages, expected ${n}`);
  const transport = nodemailer.createTransport({
    ...transportOptions({ host: '127.0.0.1', port: smtpPort, security: 'none', username: null }, null, parseAllowList(['127.0.0.1'])),
    pool: true,
    maxConnections: SMTP_POOL,
  });
  opts.defer(() => transport.close());
  const blast = async (list: RenderedMessage[]) => {
    let next = 0;
    await Promise.all(Array.from({ length: config.workerConcurrency }, async () => {
      while (next < list.length) await transport.sendMail(list[next++]!);
    }));
  };
  await blast(messages.slice(0, WARMUP));
  await resetSink();
  opts.log('transactional: baseline: nodemailer straight to the sink');
  const t2 = Date.now();
  await blast(messages);
  await waitForSink(n, 'baseline');
  const baselineS = (Math.max(...(await arrivals()).map((a) => a[1])) - t2) / 1000;

  await resetSink();
  opts.log(`transactional: baseline latency at ${RATE} sends/s`);
  const baseSent = new Map<string, number>();
  const baseSends: Promise<unknown>[] = [];
  const t3 = performance.now();
  for (let i = 0; i < ticks; i++) {
    const id = `base${i}`;
    baseSent.set(id, Date.now());
    baseSends.push(transport.sendMail({ ...messages[i % messages.length]!, messageId: `<${id}@bench.test>` }));
    const wait = t3 + ((i + 1) * 1000) / RATE - performance.now();
    if (wait > 0) await sleep(wait);
  }
  const baseOfferedS = (performance.now() - t3) / 1000;
  await Promise.all(baseSends);
  await waitForSink(ticks, 'baseline latency', 30_000);
  const baseLatency = new LatencyHistogram();
  for (const [id, at] of await arrivedAt()) baseLatency.record(at - baseSent.get(id)!);

  const pathRate = n / pathS;
  const baseRate = n / baselineS;
  console.log(`\ntransactional: ${fmt(n, 0)} submits, ${opts.connections} in flight, one account, ` +
    `${config.workerConcurrency} jobs in flight, ${SMTP_POOL} SMTP connections`);
  console.log(`(the API answered the ${fmt(n, 0)} submits at ${fmt(n / submitS, 0)}/s)`);
  console.log(table(
    ['path', 'e-mails/s', 'ratio'],
    [
      ['nodemailer → sink (baseline)', fmt(baseRate, 0), '1.00'],
      ['submit → API → worker → sink', fmt(pathRate, 0), fmt(pathRate / baseRate, 2)],
    ],
    ['left', 'right', 'right'],
  ));
  console.log(`\nthroughput run: wall time of the worker's statements (summed over connections, waits included), per e-mail:`);
  console.log(table(
    ['statement', 'calls/e-mail', 'ms/e-mail'],
    queryTimes.slice(0, 12).map((q) => [q.kind, fmt(q.calls / n, 2), fmt(q.ms / n, 2)]),
    ['left', 'right', 'right'],
  ));
  if (statementTable) console.log(`\nthroughput run: PostgreSQL's time per statement (pg_stat_statements), per e-mail:\n${statementTable}`);
  console.log(`\nlatency at ${RATE}/s offered for ${opts.duration} s, open loop (submits sent at ${fmt(ticks / offeredS, 0)}/s, ` +
    `baseline sends at ${fmt(ticks / baseOfferedS, 0)}/s):`);
  const row = (label: string, h: LatencyHistogram) =>
    [label, fmt(h.count, 0), fmt(h.percentileMs(50), 1), fmt(h.percentileMs(99), 1), fmt(h.maxMs(), 1)];
  console.log(table(
    ['', 'messages', 'p50 ms', 'p99 ms', 'max ms'],
    [
      row('nodemailer: sendMail → sink (baseline)', baseLatency),
      row('submit request → sink', latency),
      row('submit request → 202 answer', answer),
    ],
    ['left', 'right', 'right', 'right', 'right'],
  ));
  console.log(`\nbatches of ${BATCH_SIZE}, one at a time (${batches} requests):`);
  console.log(table(
    ['', 'batches', 'p50 ms', 'p99 ms', 'max ms'],
    [row('batch request → 202 answer', batchAnswer), row('batch request → last message at the sink', batchDone)],
    ['left', 'right', 'right', 'right', 'right'],
  ));
}

/** The sent messages to these addresses, rendered as the send task renders them. */
async function renderSent(db: ReturnType<typeof createDb>, publicUrl: string, appSecret: string, emails: string[]) {
  const links = { publicUrl, appSecret };
  const { rows } = await sql<Record<string, any>>`
    SELECT l.id, l.email, l.to_name, l.render, l.open_tracking, l.click_tracking,
           jsonb_build_object('from_email', a.from_email, 'from_name', a.from_name) AS account,
           jsonb_build_object('subject', t.subject, 'content', t.content, 'alt_content', t.alt_content) AS template
      FROM email_send_log l
      JOIN mail_accounts a ON a.id = l.mail_account_id
      JOIN templates t ON t.id = l.template_id
     WHERE l.status = 'sent' AND l.email = ANY (${emails}::text[])
     ORDER BY l.created_at, l.id`.execute(db);
  const out: RenderedMessage[] = [];
  for (const r of rows) {
    out.push(await renderMessage({
      sendLogId: r.id, contact: {}, template: r.template, account: r.account,
      sendData: { open_tracking: r.open_tracking, click_tracking: r.click_tracking },
      event: null, campaign: null, links, variables: r.render?.variables ?? {}, hasContact: false,
      toEmail: r.email, toName: r.to_name, replyTo: null, listUnsubscribe: false,
    }));
  }
  return out;
}
