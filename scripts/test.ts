// `npm test`: runs every test file with node's test runner against a real
// PostgreSQL: the one in DATABASE_URL when set (CI), else an embedded server
// started here in a temporary directory and stopped afterwards.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { startEmbedded } from '../src/db/embedded.ts';

const root = join(import.meta.dirname, '..');

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? testFiles(join(dir, e.name)) : e.name.endsWith('.test.ts') ? [join(dir, e.name)] : [],
  );
}

const filter = process.argv.slice(2);
const files = testFiles(join(root, 'test'))
  .map((f) => relative(root, f))
  .filter((f) => filter.length === 0 || filter.some((x) => f.includes(x)))
  .sort();

let embedded: Awaited<ReturnType<typeof startEmbedded>> | undefined;
let dataDir: string | undefined;
const env = { ...process.env };
if (!env.DATABASE_URL) {
  // initdb refuses a directory the postgres user cannot reach; /tmp is fine.
  dataDir = mkdtempSync(join(tmpdir(), 'plover-test-'));
  embedded = await startEmbedded({ dataDir, log: (m) => process.stderr.write(`[test db] ${m}\n`) });
  env.DATABASE_URL = embedded.url;
}
env.APP_SECRET ??= randomBytes(32).toString('hex');
env.LOG_LEVEL ??= 'silent';

// Files that hold a page or a request to an absolute wall-clock budget run
// after the others, one at a time: run beside two other files on a 2-core
// machine, the best of their repeated timings measured the neighbours as much
// as the page (a dashboard page that takes 32 ms alone took 105 ms at best in
// one such CI run). The other timing tests assert growth, a ratio measured in
// the same run, or bounds with room for a shared machine.
const ALONE = new Set(['test/dashboard/perf.test.ts']);

// The whole run has a ceiling too (normally it takes 10-15 minutes on 2 cores):
// a stuck run fails with a message instead of running into CI's limit.
const maxMinutes = Number(process.env.PLOVER_TEST_MAX_MINUTES ?? 45);
const deadline = Date.now() + maxMinutes * 60_000;
let code = 0;
for (const [phase, concurrency] of [[files.filter((f) => !ALONE.has(f)), 3], [files.filter((f) => ALONE.has(f)), 1]] as const) {
  if (phase.length === 0) continue;
  code = (await runFiles(phase, concurrency)) || code;
}
if (embedded) {
  await embedded.stop();
  rmSync(dataDir!, { recursive: true, force: true });
}
process.exit(code);

/**
 * Runs test files with node's test runner, `concurrency` files at a time; the
 * exit code, made 1 when a test the runner heard of has no verdict.
 *
 * --test-force-exit: a file whose tests have all finished exits even if
 * something it started (a timer, a client loop, a socket) keeps its event loop
 * alive; without it one such leak hung a CI run until CI's own time limit.
 * Force-exit can lose the last verdicts of a file and still exit 0
 * (nodejs/node#64833; seen here once: 808 of 817 tests reported, green).
 * Two guards: blocking-stdout.ts makes each file's report pipe blocking, so
 * nothing is left in it at exit, and the verdicts reporter fails the run when
 * any test the runner heard of has no verdict.
 */
async function runFiles(list: readonly string[], concurrency: number): Promise<number> {
  const runnerDir = join(root, 'scripts', 'test-runner');
  const verdictDir = mkdtempSync(join(tmpdir(), 'plover-verdicts-'));
  const verdictFile = join(verdictDir, 'verdicts.json');
  const child = spawn(
    process.execPath,
    [
      '--import', join(runnerDir, 'blocking-stdout.ts'),
      '--test', `--test-concurrency=${concurrency}`, '--test-timeout=120000', '--test-force-exit',
      '--test-reporter=spec', '--test-reporter-destination=stdout',
      `--test-reporter=${join(runnerDir, 'verdicts.ts')}`, `--test-reporter-destination=${verdictFile}`,
      ...list,
    ],
    { cwd: root, env, stdio: 'inherit' },
  );
  const watchdog = setTimeout(() => {
    process.stderr.write(`\nnpm test: still running after ${maxMinutes} minutes (PLOVER_TEST_MAX_MINUTES); stopping it\n`);
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
  }, Math.max(0, deadline - Date.now()));
  watchdog.unref();
  const runCode: number = await new Promise((resolve) => child.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));
  clearTimeout(watchdog);
  const result = checkVerdicts(runCode, verdictFile);
  rmSync(verdictDir, { recursive: true, force: true });
  return result;
}

/** The run's exit code, made 1 when a test the runner heard of has no verdict (or the check could not be read). */
function checkVerdicts(runCode: number, verdictFile: string): number {
  let report: { enqueued: number; verdicts: number; missing: string[] };
  try {
    report = JSON.parse(readFileSync(verdictFile, 'utf8')) as typeof report;
  } catch (err) {
    process.stderr.write(`\nnpm test: the verdict check wrote no report (${(err as Error).message})\n`);
    return runCode || 1;
  }
  if (report.missing.length === 0) return runCode;
  process.stderr.write(
    `\nnpm test: the runner lost verdicts (${report.missing.length} of ${report.enqueued} tests, or whole files):\n` +
      report.missing.slice(0, 50).map((m) => `  ${m}\n`).join(''),
  );
  return runCode || 1;
}
