// npm test's own guards (scripts/test.ts): Node's runner can lose the verdicts
// of a file and still exit 0. The verdicts reporter must see the loss, and the
// blocking-stdout preload must prevent the force-exit kind of it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const root = join(import.meta.dirname, '..', '..');
const fixtures = join(root, 'test', 'fixtures', 'test-runner');
const runner = join(root, 'scripts', 'test-runner');

type Report = { enqueued: number; verdicts: number; missing: string[] };

/** Runs `node --test` over the files `files(dir)` names (dir: a scratch directory) with the verdicts reporter. */
function run(files: (dir: string) => string[], flags: string[]): { status: number | null; report: Report } {
  const dir = mkdtempSync(join(tmpdir(), 'plover-runner-'));
  try {
    const out = join(dir, 'verdicts.json');
    const r = spawnSync(
      process.execPath,
      [...flags, '--test', '--test-reporter=tap', `--test-reporter-destination=${join(dir, 'tap.txt')}`,
        `--test-reporter=${join(runner, 'verdicts.ts')}`, `--test-reporter-destination=${out}`, ...files(dir)],
      { cwd: root, encoding: 'utf8', env: { ...process.env, NODE_TEST_CONTEXT: undefined } },
    );
    assert.equal(r.stderr, '', 'the runner wrote no error');
    return { status: r.status, report: JSON.parse(readFileSync(out, 'utf8')) as Report };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('a file that ends before any verdict is reported is caught, although the runner exits 0', () => {
  const file = join(fixtures, 'exits-early.ts');
  const { status, report } = run(() => [file], []);
  assert.equal(status, 0, 'the runner itself sees nothing wrong');
  assert.deepEqual(report.missing, [`${file}: no test of this file reported a verdict`]);
});

test('with the blocking-stdout preload, force-exit with concurrency loses no verdict', () => {
  // Eight distinct files (the runner runs a path once however often it is
  // named). Without the preload this loses verdicts in most runs.
  const copies = (dir: string) =>
    Array.from({ length: 8 }, (_, i) => {
      const f = join(dir, `many-verdicts-${i}.ts`);
      copyFileSync(join(fixtures, 'many-verdicts.ts'), f);
      return f;
    });
  const { status, report } = run(copies, ['--import', join(runner, 'blocking-stdout.ts'), '--test-concurrency=4', '--test-force-exit']);
  assert.equal(status, 0);
  assert.equal(report.missing.length, 0, `${report.missing.length} verdicts lost`);
  assert.equal(report.verdicts, 1_600, 'eight files of 200 tests, each with its verdict');
});
