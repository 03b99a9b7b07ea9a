// A task module whose loading takes 1.5 s of CPU: a thread's boot on a loaded machine.
const end = Date.now() + 1_500;
while (Date.now() < end);
export function echo(input: unknown): unknown {
  return input;
}
/** Holds its thread for `ms` without using the CPU. */
export function hold(ms: number): number {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  return ms;
}
