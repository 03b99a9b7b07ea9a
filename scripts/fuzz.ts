// `npm run fuzz [-- --runs N] [--bursts B] [--seed S] [--hostile H] [--strict]`:
// the long contract fuzz (default 20,000 requests one at a time, then runs/20
// concurrent bursts of writes), then H requests (default 20) of each hostile
// input class (test/fuzz/hostile.ts), against a fresh database on the
// PostgreSQL in DATABASE_URL, else an embedded one started here. Prints counts
// per status and per operation and the longest event-loop stall while requests
// were served. A 5xx of a generated request always fails; with --strict, so do
// a stall over 200 ms and a 5xx of a hostile input.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startEmbedded } from '../src/db/embedded.ts';

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '20000' }, bursts: { type: 'string' }, seed: { type: 'string' }, timeout: { type: 'string', default: '10000' }, hostile: { type: 'string', default: '20' }, strict: { type: 'boolean', default: false } },
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, not ${values.runs}`);

let embedded: Awaited<ReturnType<typeof startEmbedded>> | undefined;
let dataDir: string | undefined;
if (!process.env.DATABASE_URL) {
  dataDir = mkdtempSync(join(tmpdir(), 'plover-fuzz-'));
  embedded = await startEmbedded({ dataDir, log: (m) => process.stderr.write(`[fuzz db] ${m}\n`) });
  process.env.DATABASE_URL = embedded.url;
}
process.env.APP_SECRET ??= randomBytes(32).toString('hex');
process.env.LOG_LEVEL ??= 'silent';

// Imported after the environment is set: the test helpers read it.
const { createWorld } = await import('../test/fuzz/world.ts');
const { formatStats, fuzzOperations, runFuzz, TRACKING_OPS } = await import('../test/fuzz/run.ts');
const { formatHostile, runHostile } = await import('../test/fuzz/hostile.ts');
const { STALL_LIMIT_MS } = await import('../test/fuzz/stall.ts');

const world = await createWorld();
let code = 0;
try {
  const stats = await runFuzz(world, {
    runs,
    bursts: values.bursts === undefined ? undefined : Number(values.bursts),
    seed: values.seed === undefined ? undefined : Number(values.seed),
    timeoutMs: Number(values.timeout),
    batch: 500,
    log: (line) => process.stderr.write(`${line}\n`),
  });
  console.log(formatStats(stats));
  const perClass = Number(values.hostile);
  if (perClass > 0) {
    const ops = [...fuzzOperations(world.app), ...TRACKING_OPS];
    const report = await runHostile(world, ops, { perClass, seed: stats.seed, timeoutMs: 60_000 });
    console.log(`\nhostile input classes:\n${formatHostile(report)}`);
    const problems = [
      stats.maxStallMs > STALL_LIMIT_MS && `generated requests stalled the event loop ${stats.maxStallMs.toFixed(0)} ms`,
      report.maxStallMs > STALL_LIMIT_MS && `hostile inputs stalled the event loop ${report.maxStallMs.toFixed(0)} ms`,
      report.serverErrors.length > 0 && `${report.serverErrors.length} hostile inputs got a 5xx or no answer`,
    ].filter(Boolean);
    if (problems.length) {
      console.log(`\n${values.strict ? 'FAILED' : 'goal missed (--strict makes it fatal)'}: ${problems.join('; ')} (limit ${STALL_LIMIT_MS} ms, no 5xx)`);
      if (values.strict) code = 1;
    }
  }
} catch (err) {
  console.error((err as Error).message);
  code = 1;
} finally {
  await world.close();
  if (embedded) {
    await embedded.stop();
    rmSync(dataDir!, { recursive: true, force: true });
  }
}
process.exit(code);
