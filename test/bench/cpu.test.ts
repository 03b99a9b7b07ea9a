// The isolation bench splits the service's CPU by thread (bench/lib/cpu.ts,
// threadCpuMeter): a worker thread that burns CPU must show under its own
// name, not the main thread's, and a thread started after the meter counts
// from its start.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { threadCpuMeter, threadCpuSeconds } from '../../bench/lib/cpu.ts';

const linux = process.platform === 'linux';

test('a busy worker thread counts under WorkerThread, the idle main thread barely at all', { skip: !linux && 'reads /proc' }, async () => {
  const meter = threadCpuMeter(process.pid);
  // Burns 400 ms of its own CPU (not wall time: the machine may be loaded), then waits to be ended.
  const worker = new Worker(
    `const { parentPort } = require('node:worker_threads');
     const t0 = process.threadCpuUsage();
     for (;;) { const u = process.threadCpuUsage(t0); if (u.user + u.system >= 400_000) break; }
     parentPort.postMessage('done');
     setInterval(() => {}, 1000);`,
    { eval: true },
  );
  try {
    await once(worker, 'message');
    const reading = meter();
    assert.ok(reading, 'the reading exists on Linux');
    const busy = reading.get('WorkerThread') ?? 0;
    // /proc counts in ticks of 10 ms; the thread's boot adds to it.
    assert.ok(busy >= 0.35, `WorkerThread used ${busy} s, expected at least 0.35`);
    const main = reading.get('MainThread') ?? 0;
    assert.ok(main < busy, `the waiting main thread (${main} s) used less than the busy worker (${busy} s)`);
  } finally {
    await worker.terminate();
  }
});

test('threads are listed by id with their names; a process that is gone reads undefined', { skip: !linux && 'reads /proc' }, () => {
  const threads = threadCpuSeconds(process.pid);
  assert.ok(threads);
  assert.ok([...threads.values()].some((t) => t.name === 'MainThread'), [...threads.values()].map((t) => t.name).join(', '));
  assert.ok([...threads.values()].every((t) => t.seconds >= 0));
  assert.equal(threadCpuSeconds(2 ** 22 + 1), undefined); // above Linux's largest pid
});
