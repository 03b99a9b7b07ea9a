// The README's walk-throughs run as written against a fresh server
// (scripts/readme.ts), so the README cannot drift from the code.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { freshClone, PROMISES, runWalkthroughs, walkthroughBlocks } from '../../scripts/readme.ts';

const readme = readFileSync(join(import.meta.dirname, '..', '..', 'README.md'), 'utf8');

test('the walk-throughs are marked, start the server in the background and wait for it, and suit Linux', () => {
  const blocks = walkthroughBlocks(readme);
  assert.ok(blocks.length >= 5, `${blocks.length} marked blocks`);
  assert.match(blocks[0]!, /^npm start > plover\.log 2>&1 &/);
  assert.match(blocks[0]!, /until curl -sf http:\/\/localhost:3000\/healthz/);
  assert.ok(blocks[0]!.indexOf('export KEY=') < blocks[0]!.indexOf('x-api-key: $KEY'), 'KEY is exported before it is used');
  // macOS's `open` is not a Linux command; neither is a placeholder a shell cannot run.
  for (const b of blocks) {
    assert.doesNotMatch(b, /^open /m);
    assert.doesNotMatch(b, /<team-id>|<key-id>|plv_live_\.\.\./);
  }
  assert.match(readme, /apt-get install -y chromium/);
  assert.ok(PROMISES.length >= 6);
});

test('the walk-throughs run in a fresh clone of the committed HEAD, with this checkout\'s node_modules linked', () => {
  const root = join(import.meta.dirname, '..', '..');
  const dir = mkdtempSync(join(tmpdir(), 'plover-clone-test-'));
  // Not committed: a newcomer's clone does not have it.
  const stray = join(root, `uncommitted-${process.pid}.txt`);
  writeFileSync(stray, 'x');
  try {
    const checkout = freshClone(dir);
    const head = (cwd: string) => execFileSync('git', ['rev-parse', 'HEAD'], { cwd, encoding: 'utf8' }).trim();
    assert.equal(head(checkout), head(root));
    assert.ok(existsSync(join(checkout, 'README.md')));
    assert.equal(existsSync(join(checkout, `uncommitted-${process.pid}.txt`)), false);
    assert.ok(lstatSync(join(checkout, 'node_modules')).isSymbolicLink());
    assert.ok(existsSync(join(checkout, 'node_modules', '.bin', 'node')));
  } finally {
    rmSync(stray, { force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every marked block runs as written against a fresh server and gives the answers the README promises', { timeout: 900_000 }, async (t) => {
  const result = await runWalkthroughs({ timeoutMs: 840_000 });
  t.diagnostic(`${result.blocks} blocks in ${(result.ms / 1000).toFixed(0)} s`);
  assert.ok(result.ok, `exit ${result.code}; missing: ${result.missing.join('; ') || 'none'}\n${result.output.slice(-6000)}`);
});
