// The pool's share between teams: round-robin hand-out of threads, a cap on
// the threads one team holds, and the lower CPU priority of the threads. The
// isolation bench measured what their absence costs: one team's template
// bombs filled both threads and another team's renders queued behind them.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, test } from 'node:test';
import { UntrustedPool } from '../../src/untrusted/pool.ts';

const fixture = new URL('./fixture-tasks.ts', import.meta.url).href;
const pools: UntrustedPool[] = [];
after(() => Promise.all(pools.map((p) => p.close())));
const make = (maxThreads: number) => {
  const p = new UntrustedPool({ filename: fixture, maxThreads, maxOldGenerationSizeMb: 64, budgetMs: 20_000 });
  pools.push(p);
  return p;
};

test('waiting tasks are handed out round-robin between teams, not in arrival order', async () => {
  const pool = make(1);
  await pool.run('echo', 'warm', 20_000); // the thread is started before the order is measured
  const done: string[] = [];
  const job = (team: string, tag: string) => pool.run('spin', 30, 20_000, team).then(() => void done.push(tag));
  const all = [job('A', 'a1'), job('A', 'a2'), job('A', 'a3'), job('A', 'a4'), job('B', 'b1'), job('B', 'b2')];
  await Promise.all(all);
  // FIFO would finish a1 a2 a3 a4 b1 b2: B's first task would wait for all of A's.
  assert.deepEqual(done, ['a1', 'a2', 'b1', 'a3', 'b2', 'a4']);
});

test('one team holds at most all threads but one: another team runs at once beside its long tasks', async () => {
  const pool = make(2);
  assert.equal(pool.perTeamThreads, 1);
  // Both threads started first (two teams, so the cap does not serialise them): a
  // thread's start-up on a loaded machine is not what is measured.
  await Promise.all([pool.run('spin', 50, 20_000, 'warm 1'), pool.run('spin', 50, 20_000, 'warm 2')]);
  const order: string[] = [];
  const heavy = [1, 2, 3].map((i) => pool.run('spin', 1_000, 20_000, 'A').then(() => void order.push(`A${i}`)));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(pool.load('A'), { running: 1, waiting: 2 });
  await pool.run('echo', 'B', 20_000, 'B').then(() => void order.push('B'));
  await Promise.all(heavy);
  // B did not wait behind A's queued tasks (FIFO: B came after A1 and A2, which took both threads).
  assert.ok(order.indexOf('B') < order.indexOf('A2'), order.join(' '));
  assert.deepEqual(order.filter((x) => x !== 'B'), ['A1', 'A2', 'A3']);
});

test('a full queue is refused at once with reason overloaded', async () => {
  const pool = new UntrustedPool({ filename: fixture, maxThreads: 1, maxQueue: 2, budgetMs: 20_000 });
  pools.push(pool);
  const first = pool.run('spin', 200, 20_000, 'A');
  const queued = [pool.run('echo', 1, 20_000, 'A'), pool.run('echo', 2, 20_000, 'B')];
  await assert.rejects(pool.run('echo', 3, 20_000, 'C'), /too much work is waiting/);
  await Promise.all([first, ...queued]);
});

test('the threads run at a lower CPU priority than the thread that answers requests (Linux)', { skip: process.platform !== 'linux' }, async () => {
  const pool = make(1);
  await pool.run('echo', 'start', 20_000);
  const niceOf = (tid: string) => {
    const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), nice: Number(fields[16]) };
  };
  const threads = readdirSync('/proc/self/task').map(niceOf);
  const main = threads.find((t) => t.comm === 'MainThread');
  const workers = threads.filter((t) => t.comm === 'WorkerThread');
  assert.ok(workers.length >= 1, 'a pool thread is running');
  assert.equal(main?.nice, 0);
  for (const w of workers) assert.equal(w.nice, 10);
});

test("a team over its CPU share waits for its next task; another team's runs at once", async () => {
  // Share 0.1 of a core after a burst of 100 ms: A's 300 ms of CPU leaves a debt
  // of about 300 ms, back under the burst after (300 - 100) / 0.1 = 2,000 ms of
  // wall clock, whatever the machine's load (the debt drains by the clock).
  const pool = new UntrustedPool({ filename: fixture, maxThreads: 2, perTeamThreads: 2, budgetMs: 20_000, teamCpuShare: 0.1, teamCpuBurstMs: 100 });
  pools.push(pool);
  await Promise.all([pool.run('echo', 1, 20_000, 'warm 1'), pool.run('echo', 2, 20_000, 'warm 2')]);
  await pool.run('burn', 300, 20_000, 'A');
  const ended = Date.now();
  const order: string[] = [];
  const a = pool.run('echo', 'A', 20_000, 'A').then(() => void order.push('A'));
  const b = pool.run('echo', 'B', 20_000, 'B').then(() => void order.push('B'));
  await new Promise((r) => setImmediate(r));
  // Both threads are free: only the share holds A back.
  assert.deepEqual(pool.load('A'), { running: 0, waiting: 1 });
  await b;
  await a;
  assert.deepEqual(order, ['B', 'A']);
  const waited = Date.now() - ended;
  assert.ok(waited >= 1_500, `A's next task began ${waited} ms after its 300 ms of CPU; the share allows it after about 2,000`);
});

test('a task that ended its thread is charged its whole budget', async () => {
  const pool = new UntrustedPool({ filename: fixture, maxThreads: 2, budgetMs: 200, teamCpuShare: 0.1, teamCpuBurstMs: 100 });
  pools.push(pool);
  await pool.run('echo', 'warm', 200, 'warm');
  await assert.rejects(pool.run('burn', 5_000, 200, 'C'), /took longer than 200 ms/);
  const ended = Date.now();
  // Charged 200 ms: (200 - 100) / 0.1 = 1,000 ms before C's next task.
  await pool.run('echo', 'C', 200, 'C');
  const waited = Date.now() - ended;
  assert.ok(waited >= 700, `C's next task began ${waited} ms after the overrun`);
});

test('work of no team is not held back by the share', async () => {
  const pool = new UntrustedPool({ filename: fixture, maxThreads: 2, perTeamThreads: 2, budgetMs: 20_000, teamCpuShare: 0.01, teamCpuBurstMs: 10 });
  pools.push(pool);
  await pool.run('burn', 200, 20_000);
  const t0 = Date.now();
  await pool.run('echo', 'again', 20_000);
  assert.ok(Date.now() - t0 < 1_000, `the second task of no team waited ${Date.now() - t0} ms`);
});
