// How much rendered mail the send jobs of a worker hold (src/mail/render-ahead.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RenderAhead, renderedCharsHeld, type Ticket } from '../../src/mail/render-ahead.ts';

const tick = () => new Promise((r) => setImmediate(r));

/** Enters `n` messages of a job; `admitted` lists the indexes let in so far. */
function enterAll(job: RenderAhead, n: number) {
  const admitted: number[] = [];
  const tickets = Array.from({ length: n }, (_, i) => job.enter().then((t) => (admitted.push(i), t)));
  return { admitted, ticket: (i: number): Promise<Ticket> => tickets[i]! };
}

test('a job has at most `renderingPerJob` messages in the pool; rendered ones make room, under the budget', async () => {
  const job = new RenderAhead({ renderingPerJob: 2, processChars: 1_000 });
  const { admitted, ticket } = enterAll(job, 5);
  await tick();
  assert.deepEqual(admitted, [0, 1]);
  (await ticket(0)).hold(10);
  await tick();
  assert.deepEqual(admitted, [0, 1, 2], 'a rendered message frees its place in the pool');
  (await ticket(1)).hold(10);
  (await ticket(2)).hold(10);
  await tick();
  assert.deepEqual(admitted, [0, 1, 2, 3, 4]);
  assert.equal(renderedCharsHeld(), 30);
  for (const i of [0, 1, 2]) (await ticket(i)).done();
  // Ended before it was rendered (a template error, a paused send): its place is freed too.
  for (const i of [3, 4]) (await ticket(i)).done();
  job.close();
  assert.equal(renderedCharsHeld(), 0);
});

test('over the characters budget a job that holds mail waits; a job that holds none is still admitted one', async () => {
  const a = new RenderAhead({ renderingPerJob: 2, processChars: 100 });
  const b = new RenderAhead({ renderingPerJob: 2, processChars: 100 });
  const ja = enterAll(a, 3);
  await tick();
  (await ja.ticket(0)).hold(150); // a large message: over the budget
  await tick();
  assert.deepEqual(ja.admitted, [0, 1], 'nothing more of a while over the budget');
  // b holds nothing: admitted one anyway (no job waits for another forever) ...
  const jb = enterAll(b, 2);
  await tick();
  assert.deepEqual(jb.admitted, [0]);
  (await jb.ticket(0)).hold(10);
  await tick();
  // ... but not a second one while over the budget.
  assert.deepEqual(jb.admitted, [0]);
  // a's large message is sent: the waiting messages of both jobs are admitted.
  (await ja.ticket(0)).done();
  await tick();
  assert.deepEqual(ja.admitted, [0, 1, 2]);
  assert.deepEqual(jb.admitted, [0, 1]);
  for (const t of [ja.ticket(1), ja.ticket(2), jb.ticket(0), jb.ticket(1)]) (await t).done();
  a.close();
  b.close();
  assert.equal(renderedCharsHeld(), 0);
});

test('done() twice, or hold() after done(), changes nothing', async () => {
  const job = new RenderAhead({ renderingPerJob: 1, processChars: 100 });
  const t1 = await job.enter();
  t1.hold(40);
  t1.done();
  t1.done();
  t1.hold(40);
  assert.equal(renderedCharsHeld(), 0);
  const { admitted, ticket } = enterAll(job, 2);
  await tick();
  assert.deepEqual(admitted, [0], 'the double done() did not free a second place');
  (await ticket(0)).done();
  (await ticket(1)).done();
  job.close();
});
