// The JSON body parser of the API. Small bodies are parsed on the event loop;
// bodies over JSON_POOL_THRESHOLD_BYTES are decoded, parsed and checked in the
// untrusted pool, so a 10 MiB bulk body holds the event loop only for the
// structured clone of its result, not for the UTF-8 decoding, the parse and
// the walk (figures in docs/security.md, "Request intake limits"). The bytes
// go to the pool by transfer, not by copy. The checks themselves are in
// lib/json-check.ts.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { untrustedPool, UntrustedWorkError } from '../untrusted/pool.ts';
import { AppError, fieldPath, validationFailed } from './errors.ts';
import { MAX_JSON_DEPTH, parseJsonBody, type JsonLimits, type ParsedJson } from '../lib/json-check.ts';

export { MAX_JSON_DEPTH } from '../lib/json-check.ts';

export type JsonBodyOptions = { maxValues: number; poolThresholdBytes: number };

/**
 * Wall-clock backstop of one parse in the pool. Parsing is linear and bounded
 * by the body limits (a 10 MiB body takes well under a second of CPU), so this
 * only has to outlast a busy machine: the pool's threads run at a lower
 * priority, and at load 15 on two cores a 1 MiB body took over the former 2 s.
 */
const JSON_PARSE_BUDGET_MS = 10_000;

/** Counts parses by where they ran; tests read it to prove a body was never parsed. */
export const jsonParseCount = { inline: 0, pool: 0 };

/**
 * Parses a request body. `team`: the authenticated team whose body this is (the
 * pool's fair share); none on routes without a key. A body over the threshold
 * goes to the pool as bytes: `owned` (the caller keeps no reference) moves its
 * memory there without a copy, and leaves `body` empty; otherwise it is copied.
 */
export async function parseJsonRequestBody(body: Buffer, opts: JsonBodyOptions, team?: string, owned = false): Promise<unknown> {
  const limits: JsonLimits = { maxDepth: MAX_JSON_DEPTH, maxValues: opts.maxValues };
  let parsed: ParsedJson;
  if (body.byteLength <= opts.poolThresholdBytes) {
    jsonParseCount.inline++;
    parsed = parseJsonBody(body.toString('utf8'), limits);
  } else {
    jsonParseCount.pool++;
    const whole = owned && body.byteOffset === 0 && body.byteLength === body.buffer.byteLength && body.buffer instanceof ArrayBuffer;
    const bytes = whole ? new Uint8Array(body.buffer) : new Uint8Array(body);
    try {
      parsed = await untrustedPool().run<ParsedJson>('parseJson', { bytes, limits }, JSON_PARSE_BUDGET_MS, team, [bytes.buffer]);
    } catch (err) {
      if (!(err instanceof UntrustedWorkError)) throw err;
      if (err.reason === 'overloaded' || err.reason === 'crashed') {
        throw new AppError('SERVICE_UNAVAILABLE', 'the server is busy parsing other bodies; retry shortly', undefined, { 'retry-after': '1' });
      }
      throw validationFailed([{ field: '(body)', message: `could not be parsed within limits: ${err.message}` }], 'request body cannot be accepted');
    }
  }
  if (parsed.ok) return parsed.value;
  const field = fieldPath(parsed.problem.path) || '(body)';
  if (parsed.syntax) throw validationFailed([{ field, message: parsed.problem.message }], 'request body is not valid JSON');
  throw validationFailed([{ field, message: parsed.problem.message }], 'request body cannot be accepted');
}

export function installJsonParser(app: FastifyInstance, opts: JsonBodyOptions): void {
  app.removeContentTypeParser('application/json');
  // As bytes: Fastify's string mode decodes each chunk and joins them on the
  // event loop; a large body is decoded in the pool instead. Nothing else
  // holds the buffer Fastify collected, so it is moved there, not copied.
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request: FastifyRequest, body: string | Buffer) =>
    parseJsonRequestBody(body as Buffer, opts, request.auth?.teamId, true)); // parseAs 'buffer': always a Buffer
}
