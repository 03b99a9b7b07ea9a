// `npm run fuzz [-- --runs N] [--bursts B] [--seed S]`: the long contract fuzz
// (default 20,000 requests one at a time, then runs/20 concurrent bursts of
// writes) against a fresh database on the PostgreSQL in DATABASE_URL, else an
// embedded one started here. Prints counts per status and per operation.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startEmbedded } from '../src/db/embedded.ts';

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '20000' }, bursts: { type: 'string' }, seed: { type: 'string' }, timeout: { type: 'string', default: '10000' } },
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
const { formatStats, runFuzz } = await import('../test/fuzz/run.ts');

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
