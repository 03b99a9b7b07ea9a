// One error shape and one code-to-status map for everything the service
// answers. Feature code throws the domain errors of lib/errors.ts; this edge
// maps them, and everything else, to a status and the envelope.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { leaveBodyUnread } from './unread-body.ts';
import { AppError, detailsFromAjv, fieldPath, notFound, validationFailed, type AjvIssue, type ErrorCode, type ErrorDetail } from '../lib/errors.ts';

export const ERROR_STATUS: Record<ErrorCode, number> = {
  UNAUTHORIZED: 401,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  VALIDATION_FAILED: 422,
  MAX_WEBHOOKS_EXCEEDED: 422,
  RECIPIENT_SUPPRESSED: 422,
  RATE_LIMITED: 429,
  INTERNAL_SERVER_ERROR: 500,
  SERVICE_UNAVAILABLE: 503,
};

/** The HTTP status of each domain error code (lib/errors.ts): the edge's one map. */
export const statusOf = (code: ErrorCode): number => ERROR_STATUS[code];

// The edge's routes may take the domain errors from here too; feature code takes them from lib.
export { AppError, notFound, validationFailed, detailsFromAjv, fieldPath, type ErrorCode, type ErrorDetail };

export const ErrorBody = Type.Object(
  {
    ok: Type.Literal(false),
    error: Type.Object({
      code: Type.String(),
      message: Type.String(),
      details: Type.Optional(Type.Array(Type.Object({ field: Type.String(), message: Type.String() }))),
    }),
  },
  { $id: 'ErrorBody', title: 'Error', description: 'The error envelope: a code, a message and, for validation errors, one detail per problem.' },
);

export function errorBody(code: ErrorCode, message: string, details?: ErrorDetail[]) {
  return { ok: false as const, error: details ? { code, message, details } : { code, message } };
}

/** Maps any thrown error to [status, body]. Unknown errors are 500 without internals. */
export function toErrorResponse(err: unknown): { status: number; body: ReturnType<typeof errorBody>; headers?: Record<string, string> } {
  if (err instanceof AppError) {
    return { status: statusOf(err.code), body: errorBody(err.code, err.message, err.details), headers: err.headers };
  }
  const e = err as FastifyError & { validationContext?: string; validation?: AjvIssue[] };
  if (e && Array.isArray(e.validation)) {
    const part = e.validationContext;
    return { status: 422, body: errorBody('VALIDATION_FAILED', `invalid ${part ?? 'request'}`, detailsFromAjv(e.validation, part)) };
  }
  switch (e?.code) {
    // An id longer than the router takes names nothing, like any other non-UUID id.
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return { status: 404, body: errorBody('NOT_FOUND', 'no such resource: a path parameter is too long') };
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { status: 413, body: errorBody('PAYLOAD_TOO_LARGE', 'request body is too large') };
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return { status: 415, body: errorBody('UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be application/json') };
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return {
        status: 422,
        body: errorBody('VALIDATION_FAILED', 'request body is not valid JSON', [{ field: '(body)', message: e.message }]),
      };
  }
  if (e instanceof SyntaxError || e?.statusCode === 400) {
    return { status: 422, body: errorBody('VALIDATION_FAILED', 'malformed request', [{ field: '(request)', message: String(e.message) }]) };
  }
  if (e?.statusCode === 413) return { status: 413, body: errorBody('PAYLOAD_TOO_LARGE', 'request body is too large') };
  if (e?.statusCode === 415) return { status: 415, body: errorBody('UNSUPPORTED_MEDIA_TYPE', 'unsupported Content-Type') };
  // PostgreSQL text and jsonb cannot hold U+0000 (22P05) nor invalid encodings
  // (22021): a client's string, so a 422, never a 500. The write rolled back.
  if (e?.code === '22P05' || e?.code === '22021') {
    return {
      status: 422,
      body: errorBody('VALIDATION_FAILED', 'a text value contains a character that cannot be stored', [
        { field: '(body)', message: 'must not contain the NUL character (\\u0000)' },
      ]),
    };
  }
  if (isDatabaseUnavailable(e)) {
    return { status: 503, body: errorBody('SERVICE_UNAVAILABLE', 'the database is unavailable; retry shortly') };
  }
  return { status: 500, body: errorBody('INTERNAL_SERVER_ERROR', 'internal server error') };
}

const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', '57P01', '57P02', '57P03', '08000', '08001', '08003', '08006']);
function isDatabaseUnavailable(e: { code?: string; message?: string } | undefined): boolean {
  if (!e) return false;
  if (e.code && UNAVAILABLE_CODES.has(e.code)) return true;
  // pg's own connection errors carry no code. "not queryable" is what a client
  // answers after its connection broke: Kysely's ROLLBACK of a transaction whose
  // connection died throws it in place of the original error (seen when the
  // database stopped under load).
  return /timeout exceeded when trying to connect|Connection terminated|is not queryable/.test(e.message ?? '');
}

export function sendError(reply: FastifyReply, err: unknown, request?: FastifyRequest): FastifyReply {
  const { status, body, headers } = toErrorResponse(err);
  if (status >= 500 && request) request.log.error({ err }, 'request failed');
  if (headers) reply.headers(headers);
  return reply.code(status).type('application/json; charset=utf-8').send(body);
}

/** A rejection as the Error a callback hook passes to done() (a falsy one would read as success there). */
export const hookError = (err: unknown): Error => (err instanceof Error ? err : new Error(`hook rejected with ${String(err)}`));

/**
 * Installs the error and not-found handlers. 405 when the path exists under
 * another method. Unknown paths and methods are answered in onRequest, from the
 * headers: Fastify's not-found route would read and parse a body first.
 */
export function installErrorHandlers(
  app: FastifyInstance,
  notFoundPreHandler?: (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>,
  /** Answers a 404 or 405 as a page instead (the dashboard's HTML); returns false to leave it to the JSON answer. */
  pageAnswer?: (request: FastifyRequest, reply: FastifyReply, status: 404 | 405, message: string) => Promise<boolean>,
): void {
  const routes: { re: RegExp; methods: Set<string> }[] = [];
  app.addHook('onRoute', (opts) => {
    const methods = ([] as string[]).concat(opts.method);
    const pattern = opts.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+');
    const re = new RegExp(`^${pattern}/?$`);
    const existing = routes.find((r) => r.re.source === re.source);
    if (existing) methods.forEach((m) => existing.methods.add(m));
    else routes.push({ re, methods: new Set(methods) });
  });

  app.setErrorHandler((err, request, reply) => sendError(reply, err, request));

  const answerNotFound = async (request: FastifyRequest, reply: FastifyReply) => {
    const path = request.url.split('?')[0];
    const allowed = routes.find((r) => r.re.test(path));
    if (allowed) {
      reply.header('allow', [...allowed.methods].join(', '));
      const message = `${request.method} is not allowed on ${path}`;
      if (pageAnswer && (await pageAnswer(request, reply, 405, message))) return reply;
      return sendError(reply, new AppError('METHOD_NOT_ALLOWED', message));
    }
    if (pageAnswer && (await pageAnswer(request, reply, 404, 'This page does not exist.'))) return reply;
    return sendError(reply, new AppError('NOT_FOUND', `no route ${request.method} ${path}`));
  };

  const handleNotFound = async (request: FastifyRequest, reply: FastifyReply) => {
    leaveBodyUnread(request, reply);
    if (notFoundPreHandler) await notFoundPreHandler(request, reply);
    if (reply.sent) return;
    await answerNotFound(request, reply);
  };
  // Callback style: a matched route (nearly every request) passes without a
  // promise. Fastify runs no later hook once the reply is sent. A block body
  // that returns nothing: returning the promise as well would move the chain
  // on twice.
  app.addHook('onRequest', (request, reply, done) => {
    if (!request.is404) {
      done();
      return;
    }
    handleNotFound(request, reply).then(
      () => done(),
      (err: unknown) => done(hookError(err)),
    );
  });
  // Only reached if a request skipped the hook above (none does today).
  app.setNotFoundHandler((request, reply) => answerNotFound(request, reply));
}
