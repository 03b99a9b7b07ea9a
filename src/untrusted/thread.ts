// The module each pool thread loads (untrusted/pool.ts): it loads the task
// module named in workerData at boot, and runs one task per call, first
// telling the pool the task has begun and on which thread. The pool's budget
// counts from that moment, in that thread's CPU time: a thread's boot (about
// 0.75 s of CPU, at the threads' low priority, can take many seconds on a
// loaded machine) is not the task's time.
import { threadId } from 'node:worker_threads';
import { workerData } from 'piscina';

type Tasks = Record<string, (input: unknown) => unknown>;
const tasks = (await import((workerData as { tasks: string }).tasks)) as Tasks;

export type Envelope = { name: string; input: unknown; started: Int32Array };

export function run({ name, input, started }: Envelope): unknown {
  Atomics.store(started, 1, threadId);
  Atomics.store(started, 0, 1);
  Atomics.notify(started, 0);
  const task = tasks[name];
  if (typeof task !== 'function') throw new Error(`no pool task named ${name}`);
  return task(input);
}
