// The JSON body parser: Fastify's own (prototype poisoning is an error), plus
// two checks on what it parsed, both found by the contract fuzz as 500s:
// - nesting: V8 parses any depth, but JSON.stringify and other recursive code
//   further in overflow the stack near 10,000 levels; no real body nears 64.
// - unpaired surrogates ("\ud800"): JSON allows the escape, PostgreSQL's json
//   and jsonb refuse it (22P02) when the value reaches an event payload.
import type { FastifyInstance } from 'fastify';
import { fieldPath, validationFailed, type ErrorDetail } from './errors.ts';

export const MAX_JSON_DEPTH = 64;

/** The first problem of a parsed body (too deep, a string that is not valid Unicode), walked without recursion. */
export function checkJsonValue(value: unknown, maxDepth = MAX_JSON_DEPTH): ErrorDetail | null {
  const stack: [unknown, number, string][] = [[value, 0, '']];
  while (stack.length) {
    const [v, depth, path] = stack.pop()!;
    if (typeof v === 'string') {
      if (!v.isWellFormed()) return { field: fieldPath(path) || '(body)', message: 'must be valid Unicode (an unpaired surrogate escape is not)' };
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (depth + 1 > maxDepth) return { field: '(body)', message: `is nested deeper than ${maxDepth} levels` };
    const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x] as const) : Object.entries(v);
    for (const [k, child] of entries) {
      if (!k.isWellFormed()) return { field: fieldPath(path) || '(body)', message: 'has a field name that is not valid Unicode' };
      stack.push([child, depth + 1, `${path}/${k}`]);
    }
  }
  return null;
}

export function installJsonParser(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    parse(request, body as string, (err: Error | null, value?: unknown) => {
      if (err) return done(err, undefined);
      const problem = checkJsonValue(value);
      if (problem) return done(validationFailed([problem], 'request body cannot be accepted'), undefined);
      done(null, value);
    });
  });
}
