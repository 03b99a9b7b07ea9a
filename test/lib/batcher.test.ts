import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Batcher } from '../../src/lib/batcher.ts';

/** A batch function whose calls the test releases by hand, recording what each batch held. */
function gated<I>() {
  const batches: I[][] = [];
  const gates: (() => void)[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const run = async (items: I[]) => {
    batches.push(items);
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    await new Promise<void>((r) => gates.push(r));
    inFlight--;
    return items.map((i) => `r:${String(i)}`);
  };
  const releaseNext = async () => {
    while (gates.length === 0) await new Promise((r) => setImmediate(r));
    gates.shift()!();
  };
  return { run, batches, releaseNext, maxInFlight: () => maxInFlight };
}

test('items of one tick share a batch, and each caller gets its own result', async () => {
  const g = gated<number>();
  const b = new Batcher<number, string>(g.run, { max: 100 });
  const ps = [1, 2, 3].map((i) => b.add(i));
  await g.releaseNext();
  assert.deepEqual(await Promise.all(ps), ['r:1', 'r:2', 'r:3']);
  assert.deepEqual(g.batches, [[1, 2, 3]]);
});

test('what arrives while a batch runs waits and goes, all together, into the next one; never two at once', async () => {
  const g = gated<number>();
  const b = new Batcher<number, string>(g.run, { max: 100 });
  const first = b.add(1);
  while (g.batches.length === 0) await new Promise((r) => setImmediate(r));
  const later = [2, 3, 4, 5].map((i) => b.add(i));
  // Still only the first batch: the others wait for it however long it takes.
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(g.batches, [[1]]);
  await g.releaseNext();
  assert.equal(await first, 'r:1');
  await g.releaseNext();
  assert.deepEqual(await Promise.all(later), ['r:2', 'r:3', 'r:4', 'r:5']);
  assert.deepEqual(g.batches, [[1], [2, 3, 4, 5]]);
  assert.equal(g.maxInFlight(), 1);
});

test('a batch holds at most max items; a full batch goes without waiting for delayMs', async () => {
  const g = gated<number>();
  const b = new Batcher<number, string>(g.run, { max: 3, delayMs: 60_000 });
  const ps = [1, 2, 3, 4, 5, 6, 7].map((i) => b.add(i));
  // The full batch went at once (a 60 s delay would time the test out otherwise).
  await g.releaseNext();
  await g.releaseNext();
  // The last one is not full: it goes when the previous batch ends (busy → flush), not after delayMs.
  await g.releaseNext();
  assert.deepEqual(await Promise.all(ps), ['r:1', 'r:2', 'r:3', 'r:4', 'r:5', 'r:6', 'r:7']);
  assert.deepEqual(g.batches, [[1, 2, 3], [4, 5, 6], [7]]);
});

test('delayMs holds the first item of an idle batcher for company', async () => {
  const seen: number[][] = [];
  const b = new Batcher<number, number>(async (items) => {
    seen.push(items);
    return items.map((i) => i * 2);
  }, { max: 100, delayMs: 30 });
  const p1 = b.add(1);
  await new Promise((r) => setTimeout(r, 10));
  const p2 = b.add(2);
  assert.deepEqual(await Promise.all([p1, p2]), [2, 4]);
  assert.deepEqual(seen, [[1, 2]]);
});

test("a batch's error reaches every caller of that batch and no other; the batcher goes on", async () => {
  let calls = 0;
  const b = new Batcher<number, number>(async (items) => {
    calls++;
    if (items.includes(13)) throw new Error('unlucky');
    return items;
  }, { max: 100 });
  const bad = [12, 13].map((i) => b.add(i));
  const results = await Promise.allSettled(bad);
  assert.deepEqual(results.map((r) => r.status), ['rejected', 'rejected']);
  assert.equal(((results[0] as PromiseRejectedResult).reason as Error).message, 'unlucky');
  assert.equal(await b.add(14), 14);
  assert.equal(calls, 2);
});

test('a batch function that returns the wrong number of results fails its callers instead of misassigning', async () => {
  const b = new Batcher<number, number>(async (items) => items.slice(1), { max: 100 });
  await assert.rejects(Promise.all([b.add(1), b.add(2)]), /1 results for 2 items/);
});

test('close sends what waits and resolves when nothing is in flight', async () => {
  const done: number[] = [];
  const b = new Batcher<number, void>(async (items) => {
    await new Promise((r) => setTimeout(r, 15));
    done.push(...items);
    return items.map(() => undefined);
  }, { max: 2, delayMs: 60_000 });
  for (const i of [1, 2, 3, 4, 5]) void b.add(i);
  await b.close();
  assert.deepEqual(done, [1, 2, 3, 4, 5]);
});

test('max below 1 is refused', () => {
  assert.throws(() => new Batcher(async (x: number[]) => x, { max: 0 }), /max must be at least 1/);
});
