// `npm run soak -- [--minutes N] [--rate R]`
//
// Starts Plover as deployed (an API process with RUN_WORKER=false and a worker
// process), a webhook receiver and an SMTP sink in this process, and drives a
// steady mixed load for N minutes (default 3) at R requests/s (default 30):
// contact upserts, bulk upserts, ingested lead.created events (a campaign sends
// each lead an e-mail to the sink), tracking hits on the real open-pixel and
// click URLs found in those e-mails, and the webhook deliveries of every saved
// contact and sent e-mail. Open loop: requests start on schedule whether or not
// earlier ones have answered, so a slow service shows up as latency.
//
// The same load runs for --warmup seconds first (default 120), not reported:
// a fresh Node process's RSS climbs while V8 sizes its heap (measured: the
// worker went 288 → 316 → 363 → 364 → 365 MiB over minutes 1-5 at 30/s, flat
// from minute 3), and the memory check is about growth under steady load.
// Then per minute: requests, errors, p99 latency, mails and webhook deliveries
// received, and the resident memory (VmRSS, median of the minute's samples) of
// each process. Exits 1 on any error (a non-2xx/3xx answer, a delivery or send
// not completed at the end) or if a process's RSS grew more than 10% from
// minute 1 to the last minute.
//
// Database: DATABASE_URL when set (a fresh database is made on that server and
// dropped at the end; APP_SECRET generated when unset), else an embedded
// PostgreSQL in a temporary directory.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { SMTPServer } from 'smtp-server';
import { startEmbedded } from '../src/db/embedded.ts';
import { migrate } from '../src/db/migrate.ts';
import { createDb, createPool } from '../src/db/pool.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';

const { values } = parseArgs({
  options: { minutes: { type: 'string', default: '3' }, rate: { type: 'string', default: '30' }, warmup: { type: 'string', default: '120' } },
});
const minutes = Number(values.minutes);
const rate = Number(values.rate);
const warmupS = Number(values.warmup);
if (!(Number.isInteger(minutes) && minutes >= 2 && minutes <= 1440) || !(rate > 0 && rate <= 1000) || !(warmupS >= 0 && warmupS <= 3600)) {
  console.error('usage: npm run soak -- [--minutes N (2..1440)] [--rate requests/s] [--warmup seconds]');
  process.exit(2);
}
const root = join(import.meta.dirname, '..');
const log = (m: string) => process.stderr.write(`[soak] ${m}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Cleanup runs last in, first out, also on Ctrl-C.
const cleanups: (() => unknown)[] = [];
async function cleanup(): Promise<void> {
  for (let fn = cleanups.pop(); fn; fn = cleanups.pop()) await Promise.resolve(fn()).catch((e) => log(`cleanup: ${e}`));
}
process.once('SIGINT', () => void cleanup().finally(() => process.exit(130)));

// --- database -----------------------------------------------------------------
async function openDatabase(): Promise<{ url: string; appSecret: string }> {
  const base = process.env.DATABASE_URL?.trim();
  if (base) {
    const name = `plover_soak_${randomBytes(5).toString('hex')}`;
    const admin = new pg.Client({ connectionString: base });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    cleanups.push(async () => {
      const c = new pg.Client({ connectionString: base });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    });
    const u = new URL(base);
    u.pathname = `/${name}`;
    return { url: u.toString(), appSecret: process.env.APP_SECRET ?? randomBytes(32).toString('hex') };
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'plover-soak-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const embedded = await startEmbedded({ dataDir, log });
  cleanups.push(() => embedded.stop());
  return { url: embedded.url, appSecret: embedded.appSecret };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createNetServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

// A bounded old generation: with V8's default, the worker's RSS swung between
// 225 and 334 MiB on a cycle of about four minutes (major GCs returning pages),
// so minute 1 against minute 3 compared two random points of that cycle (a
// 10-minute run "grew" 35% from a trough to a peak). Bounded, major GCs come
// often enough that a minute's median is the level, and a real leak ends in an
// out-of-memory crash, which the soak reports as errors.
const HEAP_MIB = 192;

function startProcess(entry: string, env: NodeJS.ProcessEnv): ChildProcess {
  const child = spawn(process.execPath, [`--max-old-space-size=${HEAP_MIB}`, entry], { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  cleanups.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(t);
  });
  return child;
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

// --- receiver and SMTP sink ------------------------------------------------------
let deliveries = 0;
const envelopes = new Set<string>();
async function startReceiver(): Promise<string> {
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      deliveries++;
      try {
        envelopes.add(JSON.parse(Buffer.concat(chunks).toString('utf8')).id);
      } catch {
        // counted; the soak checks completion from the database
      }
      res.writeHead(200);
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
}

let mails = 0;
const trackingUrls: string[] = [];
function decodeQp(s: string): string {
  return s.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));
}
async function startSmtpSink(): Promise<number> {
  const server = new SMTPServer({
    secure: false, disabledCommands: ['STARTTLS'], authOptional: true, logger: false, closeTimeout: 100,
    onData(stream, _session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        mails++;
        const text = decodeQp(Buffer.concat(chunks).toString('utf8'));
        const found = text.match(/http:\/\/127\.0\.0\.1:\d+\/t\/[oc]\/[^\s"'<>)\]]+/g) ?? [];
        // Keep a bounded pool of real links to hit (memory of the soak itself stays flat).
        for (const u of new Set(found.map((x) => x.replace(/&amp;/g, '&')))) {
          if (trackingUrls.length < 2_000) trackingUrls.push(u);
          else trackingUrls[Math.floor(Math.random() * trackingUrls.length)] = u;
        }
        callback();
      });
    },
  });
  server.on('error', () => {});
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  return (server.server.address() as AddressInfo).port;
}

// --- load ------------------------------------------------------------------------
type Minute = { requests: number; errors: number; latencies: number[]; rss: Record<string, number[]>; heap: number[]; mails: number; deliveries: number };
const newMinute = (): Minute => ({ requests: 0, errors: 0, latencies: [], rss: {}, heap: [], mails: 0, deliveries: 0 });
const errorSamples: string[] = [];

async function main(): Promise<number> {
  const { url, appSecret } = await openDatabase();
  {
    const pool = createPool(url, 2);
    await migrate(pool);
    await pool.end();
  }
  const hookUrl = await startReceiver();
  const smtpPort = await startSmtpSink();
  const apiPort = await freePort();
  const origin = `http://127.0.0.1:${apiPort}`;
  // /metrics needs a bearer token; the soak reads the API's heap there.
  const metricsToken = randomBytes(24).toString('hex');
  const env = {
    METRICS_TOKEN: metricsToken,
    // One team sends everything here; a 429 from the per-team bulk cap would
    // count as an error of the soak, which measures stability, not fairness.
    HEAVY_REQUESTS_PER_TEAM: '16',
    DATABASE_URL: url, APP_SECRET: appSecret, LOG_LEVEL: 'warn', HOST: '127.0.0.1', PORT: String(apiPort),
    PUBLIC_URL: origin, RATE_LIMIT_PER_MINUTE: '1000000', ALLOWED_PRIVATE_TARGETS: '127.0.0.1',
  };
  const api = startProcess('src/server.ts', { ...env, RUN_WORKER: 'false' });
  const worker = startProcess('src/worker.ts', env);
  for (let i = 0; ; i++) {
    if (api.exitCode !== null || worker.exitCode !== null) throw new Error('a Plover process exited during start-up');
    if (await fetch(`${origin}/readyz`).then((r) => r.ok, () => false)) break;
    if (i > 600) throw new Error('the API did not start within 60 s');
    await sleep(100);
  }
  const processes: Record<string, number> = { api: api.pid!, worker: worker.pid! };

  // A team, its key, a mail account on the sink, a template, a campaign on
  // lead.created and a webhook for saved contacts and sent e-mails.
  const pool = createPool(url, 2);
  const db = createDb(pool);
  cleanups.push(() => db.destroy());
  const team = await createTeam(db, 'soak');
  const { key } = await createApiKey(db, team.id, 'soak');
  const account = await db.insertInto('mail_accounts').values({
    team_id: team.id, host: '127.0.0.1', port: smtpPort, security: 'none', from_email: 'soak@plover.test', daily_limit: 1_000_000, status: 'active',
  }).returning('id').executeTakeFirstOrThrow();
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(origin + path, {
      method, redirect: 'manual',
      headers: { 'x-api-key': key, 'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/124.0 Safari/537.36', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, text };
  };
  const setup = async (path: string, body: unknown) => {
    const r = await call('POST', path, body);
    if (r.status !== 201) throw new Error(`setup ${path}: ${r.status} ${r.text}`);
    return JSON.parse(r.text);
  };
  const template = await setup('/public/v1/email/templates', {
    name: 'Soak', content_type: 'html', subject: 'Hello {{ contact.first_name | default: "there" }}',
    content: '<html><body><p>Hi</p><a href="https://example.com/offer?a=1">Offer</a></body></html>',
  });
  await setup('/public/v1/email/campaigns', { name: 'Soak', events: ['lead.created'], template_ids: [template.template.id], mail_account_ids: [account.id] });
  await setup('/public/v1/webhooks', { url: hookUrl, events: ['email.contact.saved', 'email.sent'] });

  // The mix, per 20 requests: 9 upserts, 1 bulk upsert (50 contacts), 5 ingested
  // leads, 5 tracking hits (open or click; an upsert while no mail has arrived yet).
  let seq = 0;
  const next = (): [string, string, unknown?] => {
    const i = seq++;
    const k = i % 20;
    if (k < 9) return ['POST', '/public/v1/email/contacts/upsert', { email: `u${i % 5000}@soak.example.com`, first_name: `U${i}` }];
    if (k === 9) return ['POST', '/public/v1/email/contacts/bulk-upsert', { contacts: Array.from({ length: 50 }, (_, j) => ({ email: `b${(i * 50 + j) % 20000}@soak.example.com` })) }];
    if (k < 15) return ['POST', '/public/v1/email/events', { event_name: 'lead.created', email: `l${i}@soak.example.com`, payload: { source: 'soak' } }];
    const u = trackingUrls[Math.floor(Math.random() * trackingUrls.length)];
    return u ? ['GET', u.slice(origin.length)] : ['POST', '/public/v1/email/contacts/upsert', { email: `u${i % 5000}@soak.example.com` }];
  };

  const minutesData: Minute[] = [];
  let current = newMinute();
  let inFlight = 0;
  let warmup: Minute | undefined; // its errors count too (answers may come in late)
  let mailsAt = 0;
  let deliveriesAt = 0;
  const start = Date.now();
  const t0 = start + warmupS * 1000; // minute 1 starts after the warm-up
  const end = t0 + minutes * 60_000;
  let warm = warmupS === 0;
  log(`load: ${rate} requests/s for ${warmupS} s of warm-up, then ${minutes} min, against ${origin} (api pid ${api.pid}, worker pid ${worker.pid})`);
  const sampler = setInterval(() => {
    for (const [name, pid] of Object.entries(processes)) (current.rss[name] ??= []).push(rssMiB(pid));
    // The API's V8 heap in use (its /metrics): tells a leak from the heap and
    // allocator settling, which RSS alone cannot.
    const m = current;
    void fetch(`${origin}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } }).then((r) => r.text()).then((t) => {
      const v = /^nodejs_heap_size_used_bytes (\S+)/m.exec(t);
      if (v) m.heap.push(Number(v[1]) / 2 ** 20);
    }, () => {});
  }, 2_000);
  let sent = 0;
  while (Date.now() < end) {
    if (api.exitCode !== null || worker.exitCode !== null) throw new Error('a Plover process exited during the soak');
    const due = Math.floor(((Date.now() - start) / 1000) * rate);
    for (; sent < due; sent++) {
      const [method, path, body] = next();
      const m = current;
      const started = performance.now();
      inFlight++;
      call(method, path, body).then(
        (r) => {
          m.latencies.push(performance.now() - started);
          if (r.status >= 400 || r.status < 200) {
            m.errors++;
            if (errorSamples.length < 10) errorSamples.push(`${method} ${path} → ${r.status} ${r.text.slice(0, 200)}`);
          }
        },
        (err: Error) => {
          m.errors++;
          if (errorSamples.length < 10) errorSamples.push(`${method} ${path} → ${err.message}`);
        },
      ).finally(() => inFlight--);
      m.requests++;
    }
    const elapsed = Date.now() - t0;
    if (!warm && elapsed >= 0) {
      warm = true;
      warmup = current;
      log(`warm-up done: ${warmup.requests} requests; RSS medians api ${median(warmup.rss.api ?? []).toFixed(1)} MiB, worker ${median(warmup.rss.worker ?? []).toFixed(1)} MiB`);
      current = newMinute();
    } else if (warm && elapsed >= (minutesData.length + 1) * 60_000) {
      current.mails = mails - mailsAt;
      current.deliveries = deliveries - deliveriesAt;
      mailsAt = mails;
      deliveriesAt = deliveries;
      minutesData.push(current);
      report(minutesData.length, current);
      current = newMinute();
    }
    await sleep(10);
  }
  while (inFlight > 0) await sleep(20);
  clearInterval(sampler);
  if (minutesData.length < minutes) {
    current.mails = mails - mailsAt;
    current.deliveries = deliveries - deliveriesAt;
    minutesData.push(current);
    report(minutesData.length, current);
  }

  // Drain: everything the load caused completes.
  let left = { deliveries: -1, sends: -1 };
  for (let i = 0; i < 600; i++) {
    const d = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status <> 'success'`);
    const s = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM email_send_log WHERE status <> 'sent'`);
    left = { deliveries: d.rows[0].n, sends: s.rows[0].n };
    if (left.deliveries === 0 && left.sends === 0) break;
    await sleep(100);
  }
  const totals = await pool.query<{ d: number; s: number }>(
    `SELECT (SELECT count(*)::int FROM webhook_deliveries) AS d, (SELECT count(*)::int FROM email_send_log) AS s`);
  log(`drained: ${totals.rows[0].d} webhook deliveries (${envelopes.size} envelopes, ${deliveries} requests), ${totals.rows[0].s} sends (${mails} mails at the sink)`);

  let failed = false;
  const errors = (warmup?.errors ?? 0) + minutesData.reduce((s, m) => s + m.errors, 0);
  if (errors > 0) {
    failed = true;
    log(`FAIL: ${errors} errors, e.g.:\n  ${errorSamples.join('\n  ')}`);
  }
  if (left.deliveries !== 0 || left.sends !== 0) {
    failed = true;
    log(`FAIL: not completed 60 s after the load: ${left.deliveries} webhook deliveries, ${left.sends} sends`);
  }
  const first = minutesData[0]!;
  const last = minutesData.at(-1)!;
  for (const name of Object.keys(processes)) {
    const a = median(first.rss[name] ?? []);
    const b = median(last.rss[name] ?? []);
    const growth = (b - a) / a;
    log(`${name} RSS: minute 1 ${a.toFixed(1)} MiB, minute ${minutesData.length} ${b.toFixed(1)} MiB (${(growth * 100).toFixed(1)}%)`);
    if (!(growth <= 0.1)) {
      failed = true;
      log(`FAIL: ${name} resident memory grew more than 10%`);
    }
  }
  log(failed ? 'soak FAILED' : 'soak passed');
  return failed ? 1 : 0;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)]! : NaN;
}

function report(n: number, m: Minute): void {
  if (n === 1) {
    console.log('minute  requests  errors  p99 ms  mails  deliveries  api RSS MiB  worker RSS MiB  api heap MiB');
    console.log('------  --------  ------  ------  -----  ----------  -----------  --------------  ------------');
  }
  const sorted = [...m.latencies].sort((a, b) => a - b);
  const p99 = sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] ?? NaN;
  const cells = [
    String(n).padStart(6), String(m.requests).padStart(8), String(m.errors).padStart(6), p99.toFixed(0).padStart(6),
    String(m.mails).padStart(5), String(m.deliveries).padStart(10),
    median(m.rss.api ?? []).toFixed(1).padStart(11), median(m.rss.worker ?? []).toFixed(1).padStart(14),
    median(m.heap).toFixed(1).padStart(12),
  ];
  console.log(cells.join('  '));
}

let code = 1;
try {
  code = await main();
} catch (err) {
  log(`FAIL: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
} finally {
  await cleanup();
}
process.exit(code);
