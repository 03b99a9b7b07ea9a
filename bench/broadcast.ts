// `npm run bench -- broadcast [--broadcast-contacts <n>] [--broadcast-sends <n>] [--duration <s>]`
//
// Broadcasts at scale. A team of N contacts (default 1,000,000), half of them
// tagged `news`; the broadcast's segment is that tag.
//
//   list      the recipient list of the whole segment (N/2) written by
//             buildBroadcastBatch, batch after batch as its job would (no
//             worker running: decisions, queued messages and send jobs only),
//             timed; then that broadcast is cancelled (its messages are never
//             sent). Baseline: one INSERT ... SELECT of the same contacts into
//             a scratch table (the raw SQL floor of writing N/2 rows).
//   send      a second broadcast capped at M recipients (default 20,000) sent
//             by a real worker (startWorker, in this process) to an SMTP sink
//             in its own process; e-mails/s from the first to the last arrival.
//             Baseline: the same number of messages sent by nodemailer alone to
//             the sink with the worker's pooling and concurrency.
//   fairness  during the send, another team submits a transactional e-mail
//             every 100 ms to the API (its own process); its submit → arrival
//             latency p50/p99, against the same submits with no broadcast.
//   memory    this process's RSS (the worker and its pool) sampled every
//             second during the send: start, peak and end (flat: no list is
//             held in memory).
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import nodemailer from 'nodemailer';
import pino from 'pino';
import { startWorker, type WorkerHandle } from '../src/background.ts';
import { buildBroadcastBatch, cancelBroadcast } from '../src/campaigns/broadcast.ts';
import { createEventCampaign } from '../src/campaigns/create.ts';
import { loadConfig } from '../src/config.ts';
import { createDb, createPool } from '../src/db/pool.ts';
import { parseAllowList } from '../src/lib/net-guard.ts';
import { closeTransports } from '../src/mail/send.ts';
import { transportOptions } from '../src/mail/transport.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { LatencyHistogram } from './lib/histogram.ts';
import { timeQueries } from './lib/query-time.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';
import type { Arrival } from './servers/smtp-sink.ts';

const SMTP_POOL = 5;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mib = (b: number) => b / 1024 / 1024;

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags['broadcast-contacts'] ?? 1_000_000;
  const m = opts.flags['broadcast-sends'] ?? 20_000;
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
    DATABASE_URL: database.url, APP_SECRET: database.appSecret, PUBLIC_URL: 'https://plover.bench.test', LOG_LEVEL: 'silent',
    ALLOWED_PRIVATE_TARGETS: '127.0.0.1', // the SMTP sink
  });
  const pool = createPool(database.url, 20);
  const db = createDb(pool);
  opts.defer(async () => {
    closeTransports();
    await db.destroy().catch(() => undefined);
  });

  const team = await createTeam(db, 'broadcaster');
  const other = await createTeam(db, 'shop');
  const { key: otherKey } = await createApiKey(db, other.id, 'bench');
  const account = async (teamId: string) => (await sql<{ id: string }>`
    INSERT INTO mail_accounts (team_id, host, port, security, from_email, daily_limit, campaign_share_percent)
    VALUES (${teamId}, '127.0.0.1', ${smtpPort}, 'none', 'news@bench.test', 10000000, 100) RETURNING id`.execute(db)).rows[0]!.id;
  const accountId = await account(team.id);
  const otherAccount = await account(other.id);
  const template = async (teamId: string) => (await sql<{ id: string }>`
    INSERT INTO templates (team_id, name, subject, content, content_type)
    VALUES (${teamId}, 'News', 'News for {{ contact.first_name }}', '<p>Hello {{ contact.first_name }}, here is the news.</p>', 'html') RETURNING id`.execute(db)).rows[0]!.id;
  const templateId = await template(team.id);
  const otherTemplate = await template(other.id);

  opts.log(`broadcast: inserting ${fmt(n, 0)} contacts, half tagged news`);
  let t0 = performance.now();
  await pool.query(`
    INSERT INTO contacts (team_id, email, first_name, tags, created_at, updated_at)
    SELECT $1, 'c' || g || '@d' || (g % 97) || '.bench.test', 'Name ' || g,
           CASE WHEN g % 2 = 0 THEN ARRAY['news'] ELSE '{}' END, now(), now()
      FROM generate_series(1, $2::int) g`, [team.id, n]);
  await pool.query('VACUUM ANALYZE contacts');
  opts.log(`  ${fmt((performance.now() - t0) / 1000, 1)} s`);
  const segment = { rules: [{ field: 'tags', operator: 'has_tag', value: 'news' }] };
  const broadcast = (name: string, sendAmount: number) => createEventCampaign(db, team.id, {
    name, campaign_type: 'broadcast', template_ids: [templateId], mail_account_ids: [accountId],
    segment_query: segment, broadcast_send: { send_amount: sendAmount, scheduled_send_time: new Date(Date.now() + 86_400_000).toISOString() },
  } as never);

  // List: the whole segment, batch after batch, no worker.
  const listed = await broadcast('List build', 0);
  const listSend = listed.campaign_sends[0]!.id;
  await sql`UPDATE campaign_sends SET status = 'sending' WHERE id = ${listSend}`.execute(db);
  opts.log(`broadcast: building the list of ${fmt(n / 2, 0)} recipients`);
  t0 = performance.now();
  let batches = 0;
  const stopTiming = timeQueries();
  for (;;) {
    await buildBroadcastBatch(db, listSend, config.appSecret);
    batches++;
    const { rows } = await sql<{ built: boolean }>`SELECT list_built AS built FROM campaign_sends WHERE id = ${listSend}`.execute(db);
    if (rows[0]!.built) break;
  }
  const listS = (performance.now() - t0) / 1000;
  const listQueries = stopTiming();
  const { rows: listedRows } = await sql<{ n: number }>`SELECT total_recipients AS n FROM campaign_sends WHERE id = ${listSend}`.execute(db);
  t0 = performance.now();
  await pool.query(`CREATE TEMP TABLE scratch AS SELECT id, email FROM contacts WHERE team_id = $1 AND 'news' = ANY (tags) ORDER BY id`, [team.id]);
  const rawS = (performance.now() - t0) / 1000;
  await cancelBroadcast(db, team.id, listed.id);
  await sql`DELETE FROM graphile_worker._private_jobs`.execute(db);

  // Send: M recipients with the worker running, the other team's transactional mail beside it.
  const silent = pino({ level: 'silent' });
  let worker: WorkerHandle | undefined = await startWorker(pool, { db, config }, silent);
  opts.defer(() => worker?.stop());
  const submitTx = async (i: number, sent: Map<string, number>) => {
    const at = Date.now();
    const res = await fetch(`${api.origin}/public/v1/email/emails/submit`, {
      method: 'POST', headers: { 'x-api-key': otherKey, 'content-type': 'application/json' },
      body: JSON.stringify({ template_id: otherTemplate, mail_account_id: otherAccount, to_email: `buyer${i}@shop.bench.test` }),
    });
    const json = (await res.json()) as { email?: { id: string } };
    if (res.status !== 202 || !json.email) throw new Error(`transactional submit: ${res.status} ${JSON.stringify(json)}`);
    sent.set(json.email.id, at);
  };
  const txLatency = async (label: string, during: () => boolean, minSubmits: number) => {
    const sent = new Map<string, number>();
    for (let i = 0; during() || i < minSubmits; i++) {
      await submitTx(i, sent);
      await sleep(100);
    }
    for (let w = 0; w < 300; w++) {
      const got = new Map((await arrivals()).map(([id, at]) => [id.split('@')[0]!, at]));
      if ([...sent.keys()].every((id) => got.has(id))) {
        const h = new LatencyHistogram();
        for (const [id, from] of sent) h.record(got.get(id)! - from);
        return { label, h };
      }
      await sleep(100);
    }
    const { rows } = await sql<{ status: string; last_error: string | null; n: number }>`
      SELECT status, last_error, count(*)::int AS n FROM email_send_log WHERE team_id = ${other.id} GROUP BY 1, 2`.execute(db);
    throw new Error(`${label}: transactional messages missing at the sink: ${JSON.stringify(rows)}`);
  };
  await resetSink();
  const quiet = await txLatency('transactional, no broadcast', () => false, Math.max(20, opts.duration * 10));
  await resetSink();

  opts.log(`broadcast: sending ${fmt(m, 0)} e-mails`);
  const rss: number[] = [];
  const sampler = setInterval(() => rss.push(process.memoryUsage().rss), 1000);
  const rssStart = process.memoryUsage().rss;
  const sendCampaign = await broadcast('Send', m);
  const sendId = sendCampaign.campaign_sends[0]!.id;
  const t1 = Date.now();
  // Created for tomorrow so that nothing starts before the clock does: its time is now.
  await sql`UPDATE campaign_sends SET next_send_at = now() WHERE id = ${sendId}`.execute(db);
  await sql`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = ${`broadcast-build:${sendId}`}`.execute(db);
  let done = false;
  const busy = txLatency('transactional, during the broadcast', () => !done, 20);
  busy.catch(() => undefined); // awaited below; a failure of the send loop must not leave it unhandled
  for (let stall = 0, last = -1; ;) {
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM email_send_log WHERE campaign_send_id = ${sendId} AND status IN ('sent', 'bounced_hard', 'bounced_soft', 'failed')`.execute(db);
    const c = rows[0]!.n;
    if (c >= m) break;
    if (c === last) stall++;
    else [stall, last] = [0, c];
    if (stall > 600) throw new Error(`send: ${c} of ${m} after a minute without progress`);
    await sleep(100);
  }
  done = true;
  clearInterval(sampler);
  const rssEnd = process.memoryUsage().rss;
  const busyResult = await busy;
  // The broadcast's last result (the transactional messages beside it arrive at the same sink).
  const { rows: last } = await sql<{ at: Date }>`SELECT max(sent_at) AS at FROM email_send_log WHERE campaign_send_id = ${sendId}`.execute(db);
  const sendS = (last[0]!.at.getTime() - t1) / 1000;
  const pathRate = m / sendS;
  await worker.stop();
  worker = undefined;

  // Baseline: nodemailer alone, the same number of messages, the worker's pooling and concurrency.
  await resetSink();
  const transport = nodemailer.createTransport({
    ...transportOptions({ host: '127.0.0.1', port: smtpPort, security: 'none', username: null }, null, parseAllowList(['127.0.0.1'])),
    pool: true, maxConnections: SMTP_POOL,
  });
  opts.defer(() => transport.close());
  let next = 0;
  const t2 = Date.now();
  await Promise.all(Array.from({ length: config.workerConcurrency }, async () => {
    while (next < m) {
      const i = next++;
      await transport.sendMail({
        from: 'news@bench.test', to: `c${i}@bench.test`, subject: `News for Name ${i}`, messageId: `<base${i}@bench.test>`,
        html: `<p>Hello Name ${i}, here is the news.</p>`, text: `Hello Name ${i}, here is the news.`,
      });
    }
  }));
  for (let i = 0; (await sinkCount()) < m && i < 600; i++) await sleep(100);
  const baseS = (Math.max(...(await arrivals()).map((a) => a[1])) - t2) / 1000;
  const baseRate = m / baseS;

  console.log(`\nbroadcast: a team of ${fmt(n, 0)} contacts, segment tag = news (${fmt(n / 2, 0)} match)`);
  console.log(table(['list of the segment', 'recipients', 'seconds', 'recipients/s', 'ratio'], [
    ['INSERT ... SELECT into a scratch table (baseline)', fmt(n / 2, 0), fmt(rawS, 2), fmt(n / 2 / rawS, 0), '1.00'],
    [`buildBroadcastBatch × ${batches} (decisions, messages, send jobs)`, fmt(listedRows[0]!.n, 0), fmt(listS, 2), fmt(listedRows[0]!.n / listS, 0), fmt(listS / rawS, 1)],
  ], ['left', 'right', 'right', 'right', 'right']));
  console.log('\nlist build: wall time of its statements per batch (waits included):');
  console.log(table(['statement', 'calls/batch', 'ms/batch'],
    listQueries.slice(0, 10).map((q) => [q.kind, fmt(q.calls / batches, 2), fmt(q.ms / batches, 1)]), ['left', 'right', 'right']));
  console.log(`\nsending ${fmt(m, 0)} e-mails, ${config.workerConcurrency} jobs in flight, ${SMTP_POOL} SMTP connections:`);
  console.log(table(['path', 'e-mails/s', 'ratio'], [
    ['nodemailer → sink (baseline)', fmt(baseRate, 0), '1.00'],
    ['broadcast → list → worker → sink', fmt(pathRate, 0), fmt(pathRate / baseRate, 2)],
  ], ['left', 'right', 'right']));
  console.log(`\nanother team's transactional e-mail (one every 100 ms), submit → arrival:`);
  console.log(table(['', 'n', 'p50 ms', 'p99 ms', 'max ms'], [quiet, busyResult].map(({ label, h }) =>
    [label, fmt(h.count, 0), fmt(h.percentileMs(50), 1), fmt(h.percentileMs(99), 1), fmt(h.maxMs(), 1)]), ['left', 'right', 'right', 'right', 'right']));
  const peak = Math.max(rssStart, ...rss);
  console.log(`\nworker process RSS during the send: start ${fmt(mib(rssStart), 0)} MiB, peak ${fmt(mib(peak), 0)} MiB, end ${fmt(mib(rssEnd), 0)} MiB ` +
    `(${rss.length} samples; growth ${fmt(((rssEnd - rssStart) / rssStart) * 100, 1)} %)`);
  // Flat once warm (the render threads and the SMTP pool start with the first sends): the quarters of the run.
  const quarter = (q: number) => rss[Math.min(rss.length - 1, Math.floor((rss.length * q) / 4))] ?? rssEnd;
  console.log(`  by quarter of the send: ${[1, 2, 3, 4].map((q) => `${fmt(mib(quarter(q)), 0)} MiB`).join(', ')}`);
}
