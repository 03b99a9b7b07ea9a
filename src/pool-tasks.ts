// The worker-thread side of the untrusted pool (untrusted/pool.ts): each named export is
// one task, run by name with `pool.run(name, input)`. Tasks are pure functions
// of their structured-cloneable input; they keep only caches (e.g. compiled
// templates) between calls.

/** Proves the pool answers; used by /readyz-style checks and tests. */
export function ping(input: unknown): unknown {
  return input;
}
export { parseJson } from './untrusted/json-task.ts';

export { checkTemplate, renderMessage, renderStats } from './templates/render-tasks.ts';
/**
 * Tasks a thread loads at their first call, before the task begins (thread.ts):
 * inbound mail parsing (mailparser and its kin, about half of a thread's boot)
 * runs only in a process with the mail listener or IMAP polling, so the API's
 * threads never load it, and a thread replaced after a template bomb is
 * ready for the next render sooner.
 */
export const lazyTasks = {
  classifyInbound: () => import('./inbound/parse-task.ts'),
  classifyInboundBatch: () => import('./inbound/parse-task.ts'),
};
