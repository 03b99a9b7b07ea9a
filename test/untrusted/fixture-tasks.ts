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
export function grow(): number {
  const hold: string[] = [];
  for (;;) hold.push('x'.repeat(1024 * 1024) + hold.length);
}
export function fail(message: string): never {
  throw new Error(message);
}
