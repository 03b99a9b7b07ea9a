// `npm run bench -- [name...] [--duration <s>] [--connections <n>] [benchmark options]`
//
// Runs the named benchmarks (all known ones when none is named), one after the
// other. A benchmark is a module bench/<name>.ts exporting
// `async function run(opts: BenchOptions): Promise<void>` (lib/types.ts) that
// prints its own results to stdout; adding one is adding such a file. Progress
// goes to stderr. Helpers live in bench/lib/, benchmark servers in
// bench/servers/ (each run in its own process, see lib/server.ts).
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { openBenchPostgres, type BenchPostgres } from './lib/postgres.ts';
import type { BenchModule, BenchOptions } from './lib/types.ts';

const BENCH_DIR = import.meta.dirname;
const NAME = /^[a-z0-9][a-z0-9-]*$/;

// Options of one benchmark only. Declared here so that parsing stays strict (a
// mistyped option is an error, not ignored); each is a positive integer that
// reaches its module as opts.flags[name] (undefined when not given), and giving
// it is an error unless that benchmark runs.
const BENCH_FLAGS: Record<string, { bench: string; usage: string }> = {
  contacts: { bench: 'bulk-upsert', usage: '--contacts <n>         bulk-upsert: contacts written per pass (default 200000)' },
  events: { bench: 'webhooks', usage: '--events <n>           webhooks: events per throughput pass (default 20000; x10 deliveries in the 10-webhook pass)' },
  parked: { bench: 'webhooks', usage: '--parked <n>           webhooks: a paused backlog of n parked deliveries (another team\'s disabled webhook) present throughout' },
  backlog: { bench: 'webhooks-backlog', usage: '--backlog <n>          webhooks-backlog: parked deliveries per disabled webhook (default 100000)' },
  rows: { bench: 'csv-import', usage: '--rows <n>             csv-import: rows of the generated CSV (default 1000000)' },
  'api-scale-contacts': { bench: 'api-scale', usage: '--api-scale-contacts <n> api-scale: new contacts upserted per run, 1,000 a request (default 100000)' },
  'api-contacts': { bench: 'csv-import', usage: '--api-contacts <n>     csv-import: contacts sent through the bulk-upsert API for comparison (default min(rows, 200000))' },
  'campaign-events': { bench: 'campaigns', usage: '--campaign-events <n>  campaigns: contact.saved events drained for throughput (default 20000)' },
  'template-kb': { bench: 'campaigns', usage: '--template-kb <n>      campaigns: pad the template\'s HTML to about n KiB of static newsletter blocks (default: 1.5 KiB, unpadded)' },
  attackers: { bench: 'isolation', usage: '--attackers <n>        isolation: concurrent attacker requests per input class (default 4)' },
  'attacker-nice': { bench: 'isolation', usage: '--attacker-nice <n>    isolation: run the attackers\' own process at nice n (1-19; default: not lowered); see docs/security.md' },
  'ping-rate': { bench: 'isolation', usage: '--ping-rate <n>        isolation: the victim\'s GET /ping requests per second, open loop (default 200)' },
  'tx-emails': { bench: 'transactional', usage: '--tx-emails <n>        transactional: submits in the throughput run (default 2000)' },
  'tx-batches': { bench: 'transactional', usage: '--tx-batches <n>       transactional: 500-e-mail batch requests timed (default 5)' },
  'team-contacts': { bench: 'contacts', usage: '--team-contacts <n>    contacts: contacts of the listed team (default 1000000)' },
  'subject-rows': { bench: 'contacts', usage: '--subject-rows <n>     contacts: messages, events, hits and deliveries of the erased contact (default 100000)' },
  dsns: { bench: 'inbound', usage: '--dsns <n>             inbound: DSNs delivered to the listener per run (default 5000)' },
  'dkim-messages': { bench: 'dkim-sign', usage: '--dkim-messages <n>    dkim-sign: messages composed per mode and round (default 3000)' },
  claims: { bench: 'send-claims', usage: '--claims <n>           send-claims: messages claimed per run (default 3000)' },
  'broadcast-contacts': { bench: 'broadcast', usage: '--broadcast-contacts <n> broadcast: contacts of the team, half in the segment (default 1000000)' },
  'broadcast-sends': { bench: 'broadcast', usage: '--broadcast-sends <n>  broadcast: e-mails sent in the throughput run (default 20000)' },
  'scale-contacts': { bench: 'scale', usage: '--scale-contacts <n>   scale: contacts of the filled team (default 1000000; a tenth more in a neighbour team)' },
  'scale-events': { bench: 'scale', usage: '--scale-events <n>     scale: events of the filled team (default 10000000)' },
  'stats-messages': { bench: 'stats', usage: '--stats-messages <n>   stats: messages of the measured campaign (default 1000000)' },
};
// Options that take text, and switches, of one benchmark only: they reach its
// module as opts.text[name] and opts.switches[name].
const TEXT_FLAGS: Record<string, { bench: string; usage: string }> = {
  classes: { bench: 'isolation', usage: '--classes <list>       isolation: hostile input classes to run, e.g. a,b,e (default: all, a-i)' },
  dkim: { bench: 'campaigns', usage: '--dkim <keys>          campaigns: DKIM keys of the mail account: none, rsa, ed25519 or both (default none)' },
};
const SWITCH_FLAGS: Record<string, { bench: string; usage: string }> = {
  keyed: { bench: 'conversions', usage: '--keyed                conversions: each lead and sale with an idempotency key of its own' },
  listening: { bench: 'conversions', usage: '--listening            conversions: a campaign of the team lists lead.created and sale.created (each event gets its process_events job)' },
  strict: { bench: 'isolation', usage: '--strict               isolation: exit non-zero when a goal is missed (default: print the verdict only)' },
  screenshots: { bench: 'stats', usage: '--screenshots          stats: full-page screenshots of the dashboard at this size into docs/screenshots/ (needs Chromium)' },
  'pg-stats': { bench: 'campaigns,webhooks,tracking-replay,transactional', usage: '--pg-stats             campaigns, webhooks, tracking-replay, transactional: PostgreSQL\'s time per statement (pg_stat_statements) of each run; starts the embedded server with it (a DATABASE_URL server must preload it); other benches of the same run share that server' },
};

const USAGE = `usage: npm run bench -- [name...] [--duration <seconds>] [--connections <n>] [benchmark options]

  name                   benchmark(s) to run: ${knownBenchmarks().join(', ') || '(none)'}; default: all
  -d, --duration <s>     seconds of load per measured run (default 10)
  -c, --connections <n>  concurrent connections (default 50)
${[...Object.values(BENCH_FLAGS), ...Object.values(TEXT_FLAGS), ...Object.values(SWITCH_FLAGS)].map((f) => `  ${f.usage}`).join('\n')}

Uses the PostgreSQL in DATABASE_URL when set (a fresh database, dropped at the
end; APP_SECRET is generated when unset), else an embedded one in a temporary
directory.`;

function knownBenchmarks(): string[] {
  return readdirSync(BENCH_DIR, { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') && e.name !== 'run.ts')
    .map((e) => e.name.slice(0, -3))
    .filter((n) => NAME.test(n))
    .sort();
}

function fail(msg: string): never {
  process.stderr.write(`bench: ${msg}\n\n${USAGE}\n`);
  process.exit(2);
}

function positive(name: string, raw: string | undefined, fallback: number, integer: boolean): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    fail(`--${name} must be a positive ${integer ? 'integer' : 'number'}, got "${raw}"`);
  }
  return n;
}

let args: ReturnType<typeof parse>;
function parse() {
  return parseArgs({
    allowPositionals: true,
    options: {
      duration: { type: 'string', short: 'd' },
      connections: { type: 'string', short: 'c' },
      help: { type: 'boolean', short: 'h' },
      ...Object.fromEntries([...Object.keys(BENCH_FLAGS), ...Object.keys(TEXT_FLAGS)].map((k) => [k, { type: 'string' as const }])),
      ...Object.fromEntries(Object.keys(SWITCH_FLAGS).map((k) => [k, { type: 'boolean' as const }])),
    },
  });
}
try {
  args = parse();
} catch (err) {
  fail((err as Error).message);
}
if (args.values.help) {
  process.stdout.write(USAGE + '\n');
  process.exit(0);
}

const duration = positive('duration', args.values.duration, 10, false);
const connections = positive('connections', args.values.connections, 50, true);
const known = knownBenchmarks();
const names = args.positionals.length ? [...new Set(args.positionals)] : known;
const unknown = names.filter((n) => !known.includes(n));
if (unknown.length) fail(`unknown benchmark ${unknown.join(', ')}`);
if (!names.length) fail('no benchmarks found');
const flags: Record<string, number | undefined> = {};
for (const [flag, { bench }] of Object.entries(BENCH_FLAGS)) {
  // Declared with type 'string' in parse().
  const raw = (args.values as Record<string, string | undefined>)[flag];
  if (raw === undefined) continue;
  if (!names.includes(bench)) fail(`--${flag} applies to ${bench} only, which is not being run`);
  flags[flag] = positive(flag, raw, 0, true);
}
const text: Record<string, string | undefined> = {};
const switches: Record<string, boolean> = {};
for (const [table, into] of [[TEXT_FLAGS, text], [SWITCH_FLAGS, switches]] as const) {
  for (const [flag, { bench }] of Object.entries(table)) {
    const raw = (args.values as Record<string, unknown>)[flag];
    if (raw === undefined) continue;
    const of = bench.split(','); // a switch may serve several benchmarks
    if (!of.some((b) => names.includes(b))) fail(`--${flag} applies to ${of.join(' and ')} only, which ${of.length > 1 ? 'are' : 'is'} not being run`);
    (into as Record<string, unknown>)[flag] = raw;
  }
}

const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);

// Cleanup, also on Ctrl-C: the current benchmark's deferred functions (last in,
// first out), then the shared PostgreSQL.
let postgres: Promise<BenchPostgres> | undefined;
let deferred: (() => unknown)[] = [];
async function runDeferred(): Promise<void> {
  for (let fn = deferred.pop(); fn; fn = deferred.pop()) {
    try {
      await fn();
    } catch (err) {
      log(`cleanup failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}
async function closePostgres(): Promise<void> {
  const p = postgres;
  postgres = undefined;
  if (!p) return;
  try {
    await (await p).close();
  } catch (err) {
    log(`stopping PostgreSQL failed: ${err instanceof Error ? err.message : String(err)}`);
  }
}
let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) process.exit(130); // second Ctrl-C: give up on cleanup
    interrupted = true;
    log(`${signal}: cleaning up (again to quit at once)`);
    void runDeferred().then(closePostgres).finally(() => process.exit(130));
  });
}

let failed = 0;
for (const name of names) {
  const started = Date.now();
  log(`${name}: duration ${duration} s, ${connections} connections`);
  const opts: BenchOptions = {
    name,
    duration,
    connections,
    flags,
    text,
    switches,
    postgres: () => (postgres ??= openBenchPostgres(log, { pgStats: switches['pg-stats'] === true })),
    defer: (fn) => void deferred.push(fn),
    log,
  };
  try {
    const mod = (await import(pathToFileURL(join(BENCH_DIR, `${name}.ts`)).href)) as Partial<BenchModule>;
    if (typeof mod.run !== 'function') throw new Error(`bench/${name}.ts does not export a run function`);
    await mod.run(opts);
    log(`${name}: done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } catch (err) {
    failed++;
    log(`${name} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  } finally {
    await runDeferred();
  }
  if (interrupted) break;
}
await closePostgres();
process.exit(failed ? 1 : 0);
