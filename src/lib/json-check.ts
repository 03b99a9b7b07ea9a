// Parsing and checking a JSON request body, with no dependency so the same
// code runs on the event loop (small bodies) and in the untrusted pool (large
// ones, src/untrusted/json-task.ts). Everything is walked with an explicit
// stack, never recursion: a hostile nesting cannot overflow the stack here.
//
// Checks, each found as a 500 or a stall further in without it:
// - nesting: V8 parses any depth, but JSON.stringify and other recursive code
//   overflow the stack near 10,000 levels; no real body nears 64.
// - values: a body of 10 MiB can hold millions of values; schema validation,
//   then the handler, walk them all on the event loop. 100,000 by default,
//   ten times what the largest legal body (1,000 contacts) needs.
// - unpaired surrogates ("\ud800"): JSON allows the escape, PostgreSQL's json
//   and jsonb refuse it (22P02) when the value reaches an event payload.
// - prototype poisoning: `__proto__` and `constructor.prototype` keys are
//   refused, as Fastify's own parser (secure-json-parse) refuses them.

export type JsonLimits = { maxDepth: number; maxValues: number };
/** `path` is a JSON pointer (`/contacts/3/email`), '' for the whole body. */
export type JsonProblem = { path: string; message: string };
export type ParsedJson = { ok: true; value: unknown } | { ok: false; syntax: boolean; problem: JsonProblem };

export const MAX_JSON_DEPTH = 64;

/**
 * The first problem of a parsed value, or null. The walk that finds it keeps no
 * paths (a body of 1,000 contacts holds about 27,000 values, and building a
 * pointer string for each was most of the check's time); a problem found is
 * located by a second walk that does, with the same order, so the answer is the
 * same first problem either way.
 */
export function checkJsonValue(value: unknown, limits: JsonLimits): JsonProblem | null {
  return findProblem(value, limits) ? findProblemWithPath(value, limits) : null;
}

const problemKey = (k: string, child: unknown): string | undefined =>
  !k.isWellFormed()
    ? 'has a field name that is not valid Unicode'
    : k === '__proto__' || (k === 'constructor' && child !== null && typeof child === 'object' && Object.hasOwn(child, 'prototype'))
      ? 'has a forbidden prototype property'
      : undefined;

/** Whether the value has a problem: the walk of findProblemWithPath with two flat stacks and no paths. */
function findProblem(value: unknown, { maxDepth, maxValues }: JsonLimits): boolean {
  const values: unknown[] = [value];
  const depths: number[] = [0];
  let count = 0;
  while (values.length) {
    const v = values.pop();
    const depth = depths.pop()!;
    if (++count > maxValues) return true;
    if (typeof v === 'string') {
      if (!v.isWellFormed()) return true;
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (depth + 1 > maxDepth) return true;
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) {
        values.push(v[i]);
        depths.push(depth + 1);
      }
      continue;
    }
    for (const k of Object.keys(v)) {
      const child = (v as Record<string, unknown>)[k];
      if (problemKey(k, child) !== undefined) return true;
      values.push(child);
      depths.push(depth + 1);
    }
  }
  return false;
}

function findProblemWithPath(value: unknown, { maxDepth, maxValues }: JsonLimits): JsonProblem | null {
  const stack: [unknown, number, string][] = [[value, 0, '']];
  let count = 0;
  while (stack.length) {
    const [v, depth, path] = stack.pop()!;
    if (++count > maxValues) return { path: '', message: `holds more than ${maxValues} values` };
    if (typeof v === 'string') {
      if (!v.isWellFormed()) return { path, message: 'must be valid Unicode (an unpaired surrogate escape is not)' };
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (depth + 1 > maxDepth) return { path: '', message: `is nested deeper than ${maxDepth} levels` };
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push([v[i], depth + 1, `${path}/${i}`]);
      continue;
    }
    for (const k of Object.keys(v)) {
      const child = (v as Record<string, unknown>)[k];
      const problem = problemKey(k, child);
      if (problem !== undefined) return { path, message: problem };
      stack.push([child, depth + 1, `${path}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`]);
    }
  }
  return null;
}

/** Parses and checks a body. An empty body is `{}` (docs/api.md, "Envelope and errors": on a route that takes JSON, no body means no fields). */
export function parseJsonBody(text: string, limits: JsonLimits): ParsedJson {
  if (text.length === 0) return { ok: true, value: {} };
  let value: unknown;
  try {
    // A leading byte-order mark is allowed, as Fastify's own parser allows it.
    value = JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
  } catch (err) {
    return { ok: false, syntax: true, problem: { path: '', message: (err as Error).message } };
  }
  const problem = checkJsonValue(value, limits);
  return problem ? { ok: false, syntax: false, problem } : { ok: true, value };
}
