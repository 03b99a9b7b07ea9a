// How far send jobs render ahead of their SMTP connections (src/mail/render-ahead.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RenderAhead, renderedCharsHeld } from '../../src/mail/render-ahead.ts';

const tick = () => new Promise((r) => setImmediate(r));

test('a job renders at most `perJob` messages ahead; each one finished admits the next', async () => {
  const job = new RenderAhead({ perJob: 3, processChars: 1_000_000 });
  const admitted: number[] = [];
  const tickets = Array.from({ length: 5 }, (_, i) => job.enter().then((t) => (admitted.push(i), t)));
  await tick();
  assert.deepEqual(admitted, [0, 1, 2]);
  (await tickets[1]!).done();
  await tick();
  assert.deepEqual(admitted, [0, 1, 2, 3]);
  for (const i of [0, 2, 3]) (await tickets[i]!).done();
  await tick();
  assert.deepEqual(admitted, [0, 1, 2, 3, 4]);
  (await tickets[4]!).done();
  job.close();
  assert.equal(renderedCharsHeld(), 0);
});

test('over the process\'s character budget, jobs that hold messages wait; a job that holds none is still admitted one', async () => {
  const a = new RenderAhead({ perJob: 8, processChars: 100 });
  const b = new RenderAhead({ perJob: 8, processChars: 100 });
  const a1 = await a.enter();
  a1.hold(150); // one large message: over the budget
  assert.equal(renderedCharsHeld(), 150);
  let a2Admitted = false;
  const a2 = a.enter().then((t) => ((a2Admitted = true), t));
  // b holds nothing: admitted anyway (no job waits for another forever) ...
  const b1 = await b.enter();
  b1.hold(10);
  // ... but not a second one while over the budget.
  let b2Admitted = false;
  const b2 = b.enter().then((t) => ((b2Admitted = true), t));
  await tick();
  assert.equal(a2Admitted, false);
  assert.equal(b2Admitted, false);
  // a's large message is sent: both waiting messages are admitted.
  a1.done();
  await tick();
  assert.equal(a2Admitted, true);
  assert.equal(b2Admitted, true);
  for (const t of [await a2, b1, await b2]) t.done();
  a.close();
  b.close();
  assert.equal(renderedCharsHeld(), 0);
});

test('done() twice, or hold() after done(), changes nothing', async () => {
  const job = new RenderAhead({ perJob: 1, processChars: 100 });
  const t1 = await job.enter();
  t1.hold(40);
  t1.done();
  t1.done();
  t1.hold(40);
  assert.equal(renderedCharsHeld(), 0);
  const t2 = await job.enter();
  let third = false;
  const t3 = job.enter().then((t) => ((third = true), t));
  await tick();
  assert.equal(third, false, 'the double done() did not free a second place');
  t2.done();
  (await t3).done();
  job.close();
});
