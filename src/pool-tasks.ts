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
export { classifyInbound, classifyInboundBatch } from './inbound/parse-task.ts';
