// The JSON body parser: Fastify's own (prototype poisoning is an error), plus a
// nesting limit. V8 parses any depth, but JSON.stringify and other recursive
// code down the line overflow the stack near 10,000 levels (a 500 the contract
// fuzz found on a free-form event payload); no real body comes close to 64.
import type { FastifyInstance } from 'fastify';
import { validationFailed } from './errors.ts';

export const MAX_JSON_DEPTH = 64;

/** Depth of nested arrays and objects (a scalar is 0), walked without recursion; stops past `limit`. */
export function jsonDepth(value: unknown, limit = Infinity): number {
  let max = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (d + 1 > max) max = d + 1;
    if (max > limit) return max;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, d + 1]);
  }
  return max;
}

export function installJsonParser(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    parse(request, body as string, (err: Error | null, value?: unknown) => {
      if (err) return done(err, undefined);
      if (jsonDepth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) {
        return done(validationFailed([{ field: '(body)', message: `is nested deeper than ${MAX_JSON_DEPTH} levels` }], 'request body is nested too deeply'), undefined);
      }
      done(null, value);
    });
  });
}
