// A task module whose loading takes 1.5 s of CPU: a thread's boot on a loaded machine.
const end = Date.now() + 1_500;
while (Date.now() < end);
export function echo(input: unknown): unknown {
  return input;
}
