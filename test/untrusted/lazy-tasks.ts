// A task module with a lazy task whose module takes 1 s of CPU to load (lazy-task-module.ts).
export function echo(input: unknown): unknown {
  return input;
}
export const lazyTasks = {
  slowLoaded: () => import('./lazy-task-module.ts'),
};
