// Worker tasks for the pool's own tests: a busy loop, a heap grower, a throw.
export function echo(input: unknown): unknown {
  return input;
}
export function spin(ms: number): number {
  const end = Date.now() + ms;
  let n = 0;
  while (Date.now() < end) n++;
  return n;
}
/** Uses `ms` of this thread's CPU time (however long that takes on the wall). */
export function burn(ms: number): number {
  const cpu = () => {
    const u = process.threadCpuUsage();
    return (u.user + u.system) / 1000;
  };
  const end = cpu() + ms;
  let n = 0;
  while (cpu() < end) n++;
  return n;
}
export function grow(): number {
  const hold: string[] = [];
  for (;;) hold.push('x'.repeat(1024 * 1024) + hold.length);
}
export function fail(message: string): never {
  throw new Error(message);
}
/** Holds its thread without using CPU (a thread starved of the cores looks like this to the wall clock). */
export function idle(ms: number): number {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  return ms;
}
/**
 * Uses CPU until it is ended (or 10 s of CPU), writing the thread's CPU ms used
 * by this task into `progress[0]` as it goes, so a test can read how much it got.
 */
export function burnReporting(progress: Float64Array): number {
  const cpu = () => {
    const u = process.threadCpuUsage();
    return (u.user + u.system) / 1000;
  };
  const start = cpu();
  let used = 0;
  while (used < 10_000) {
    used = cpu() - start;
    progress[0] = Math.max(used, 0.001);
  }
  return used;
}
