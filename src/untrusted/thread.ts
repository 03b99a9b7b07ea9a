// The module each pool thread loads (untrusted/pool.ts): it loads the task
// module named in workerData at boot (and a module of its `lazyTasks` at
// that task's first call, before the task begins), and runs one task per call, first
// telling the pool the task has begun and on which thread. The pool's budget
// counts from that moment, in that thread's CPU time: a thread's boot (about
// 0.75 s of CPU, at the threads' low priority, can take many seconds on a
// loaded machine) is not the task's time.
import { threadId } from 'node:worker_threads';
import { workerData } from 'piscina';
import { sharedNow } from './clock.ts';

type Tasks = Record<string, (input: unknown) => unknown>;
type Loader = () => Promise<Record<string, unknown>>;
const tasks = (await import((workerData as { tasks: string }).tasks)) as Tasks & { lazyTasks?: Record<string, Loader> };
/** Tasks whose module is loaded at their first call (the task module's `lazyTasks`), not at boot. */
const lazy: Record<string, Loader> = tasks.lazyTasks ?? {};

/**
 * `started`: [0] 1 once the task has begun, [1] the thread's id, [2] 1 + the CPU
 * microseconds the task used in this thread, set when it returns or throws (0:
 * it never did; the pool charges it to the team's CPU share). `startCpu[0]`: this
 * thread's CPU time in ms when the task began (the clock of Worker.cpuUsage()),
 * written before [0] is set, so the pool counts the task's CPU from its true
 * start however late its own event loop sees the task begin; `startCpu[1]`: the
 * time then on the clock all threads share (`sharedNow()`, ms): the task's CPU
 * time is at most the time elapsed since, so the pool asks a thread for its CPU
 * time only once the task has run as long as its budget.
 */
export type Envelope = { name: string; input: unknown; started: Int32Array; startCpu: Float64Array };

export async function run({ name, input, started, startCpu }: Envelope): Promise<unknown> {
  let task: unknown = Object.hasOwn(tasks, name) ? tasks[name] : undefined;
  // A lazy task's module is loaded (once per thread) before the task begins: the load is the thread's, not the task's budget.
  if (typeof task !== 'function' && Object.hasOwn(lazy, name)) task = (await lazy[name]!())[name];
  const cpu0 = process.threadCpuUsage();
  startCpu[0] = (cpu0.user + cpu0.system) / 1000;
  startCpu[1] = sharedNow();
  Atomics.store(started, 1, threadId);
  Atomics.store(started, 0, 1);
  Atomics.notify(started, 0);
  if (typeof task !== 'function') throw new Error(`no pool task named ${name}`);
  try {
    return await (task as (input: unknown) => unknown)(input);
  } finally {
    const used = process.threadCpuUsage(cpu0);
    Atomics.store(started, 2, Math.min(1 + used.user + used.system, 2 ** 31 - 1));
  }
}
