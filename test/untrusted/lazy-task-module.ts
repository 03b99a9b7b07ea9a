// Loaded at the first call of `slowLoaded` (lazy-tasks.ts): 1 s of CPU, as a heavy parser's load.
const end = Date.now() + 1_000;
while (Date.now() < end);
export function slowLoaded(input: number): number {
  return input * 2;
}
