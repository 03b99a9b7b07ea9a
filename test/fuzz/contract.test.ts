// Contract fuzz in CI: fast-check-generated requests (valid and invalid) to
// every operation of the OpenAPI document and the tracking routes, against a
// real database with two seeded teams. `npm run fuzz` runs the long version.
// FUZZ_SEED=<n> replays a failing run; FUZZ_RUNS raises the count.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { formatStats, operationsOf, runFuzz } from './run.ts';
import { createWorld, type World } from './world.ts';

const RUNS = Number(process.env.FUZZ_RUNS ?? 2_000);

describe('contract fuzz', () => {
  let world: World;
  before(async () => {
    world = await createWorld();
  });
  after(() => world.close());

  test('the document lists the operations the fuzz expects to reach', () => {
    const ops = operationsOf(world.app.swagger() as never);
    // A floor, not an exact list: new operations are fuzzed without a change here.
    assert.ok(ops.length >= 30, `only ${ops.length} operations in the document`);
    assert.ok(ops.some((o) => o.id === 'POST /public/v1/email/contacts/bulk-upsert'));
  });

  test(`${RUNS} generated requests and concurrent bursts: 2xx, 3xx or 4xx with the error envelope, never 5xx, never a hang`, async (t) => {
    const stats = await runFuzz(world, { runs: RUNS, seed: process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined, timeoutMs: 15_000 });
    assert.ok(stats.total >= RUNS, `${stats.total} requests`);
    // Both kinds of answer must be common, or the generators went lopsided.
    const ok = [...stats.byStatus].filter(([s]) => s < 300).reduce((n, [, c]) => n + c, 0);
    assert.ok(ok > stats.total * 0.1, `only ${ok} successful answers:\n${formatStats(stats)}`);
    assert.ok(ok < stats.total * 0.9, `only ${stats.total - ok} error answers:\n${formatStats(stats)}`);
    t.diagnostic(`${stats.total} requests in ${(stats.ms / 1000).toFixed(1)} s, seed ${stats.seed}`);
    if (process.env.FUZZ_VERBOSE) console.log(formatStats(stats));
  });
});
