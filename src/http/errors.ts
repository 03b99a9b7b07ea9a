// One error shape and one code-to-status map (decisions.md §1) for everything
// the service answers. Handlers throw AppError; everything else is mapped here.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { leaveBodyUnread } from './unread-body.ts';

export const ERROR_STATUS = {
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
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;
export type ErrorDetail = { field: string; message: string };

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  readonly details: ErrorDetail[] | undefined;
  readonly headers: Record<string, string> | undefined;
  constructor(code: ErrorCode, message: string, details?: ErrorDetail[], headers?: Record<string, string>) {
    super(message);
    this.code = code;
    this.statusCode = ERROR_STATUS[code];
    this.details = details;
    this.headers = headers;
  }
}

export const notFound = (what = 'resource') => new AppError('NOT_FOUND', `${what} not found`);
export const validationFailed = (details: ErrorDetail[], message = 'request validation failed') =>
  new AppError('VALIDATION_FAILED', message, details);

export const ErrorBody = Type.Object(
  {
    ok: Type.Literal(false),
    error: Type.Object({
      code: Type.String(),
      message: Type.String(),
      details: Type.Optional(Type.Array(Type.Object({ field: Type.String(), message: Type.String() }))),
    }),
  },
  { $id: 'ErrorBody', title: 'Error', description: 'Error envelope (decisions.md §1)' },
);

export function errorBody(code: ErrorCode, message: string, details?: ErrorDetail[]) {
  return { ok: false as const, error: details ? { code, message, details } : { code, message } };
}

/** `/contacts/12/email` → `contacts[12].email` (the field notation of decisions.md §1). */
export function fieldPath(instancePath: string, extra?: string): string {
  const parts = instancePath.split('/').filter(Boolean).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (extra !== undefined) parts.push(extra);
  let out = '';
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out ? `.${p}` : p;
  return out;
}

type AjvIssue = { instancePath: string; keyword: string; message?: string; params: Record<string, unknown> };

// An array over its maxItems is the problem; its items' own errors are noise,
// and ajv (allErrors) reports one per item: 100,000 bad tags were a 7 MB 422.
function underOversizedArray(issues: AjvIssue[]): (path: string) => boolean {
  const oversized = new Set(issues.filter((e) => e.keyword === 'maxItems').map((e) => e.instancePath));
  if (oversized.size === 0) return () => false;
  return (path) => {
    for (let i = path.lastIndexOf('/'); i > 0; i = path.lastIndexOf('/', i - 1)) if (oversized.has(path.slice(0, i))) return true;
    return oversized.has('') && path !== '';
  };
}

export function detailsFromAjv(issues: AjvIssue[], part: string | undefined): ErrorDetail[] {
  const seen = new Set<string>();
  const details: ErrorDetail[] = [];
  const skip = underOversizedArray(issues);
  for (const e of issues) {
    if (skip(e.instancePath)) continue;
    let field = fieldPath(e.instancePath);
    let message = e.message ?? 'is invalid';
    if (e.keyword === 'required') {
      field = fieldPath(e.instancePath, String(e.params.missingProperty));
      message = 'is required';
    } else if (e.keyword === 'additionalProperties') {
      field = fieldPath(e.instancePath, String(e.params.additionalProperty));
      message = 'is not an allowed field';
    }
    if (!field) field = part === 'body' || part === undefined ? '(body)' : `(${part})`;
    const key = `${field}\u0000${message}`;
    if (!seen.has(key)) {
      seen.add(key);
      details.push({ field, message });
    }
  }
  return details;
}

/** Maps any thrown error to [status, body]. Unknown errors are 500 without internals. */
export function toErrorResponse(err: unknown): { status: number; body: ReturnType<typeof errorBody>; headers?: Record<string, string> } {
  if (err instanceof AppError) {
    return { status: err.statusCode, body: errorBody(err.code, err.message, err.details), headers: err.headers };
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

/**
 * Installs the error and not-found handlers. 405 when the path exists under
 * another method. Unknown paths and methods are answered in onRequest, from the
 * headers: Fastify's not-found route would read and parse a body first.
 */
export function installErrorHandlers(
  app: FastifyInstance,
  notFoundPreHandler?: (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>,
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

  const answerNotFound = (request: FastifyRequest, reply: FastifyReply) => {
    const path = request.url.split('?')[0];
    const allowed = routes.find((r) => r.re.test(path));
    if (allowed) {
      reply.header('allow', [...allowed.methods].join(', '));
      return sendError(reply, new AppError('METHOD_NOT_ALLOWED', `${request.method} is not allowed on ${path}`));
    }
    return sendError(reply, new AppError('NOT_FOUND', `no route ${request.method} ${path}`));
  };

  app.addHook('onRequest', async (request, reply) => {
    if (!request.is404) return;
    leaveBodyUnread(request, reply);
    if (notFoundPreHandler) await notFoundPreHandler(request, reply);
    if (reply.sent) return reply;
    return answerNotFound(request, reply);
  });
  // Only reached if a request skipped the hook above (none does today).
  app.setNotFoundHandler((request, reply) => answerNotFound(request, reply));
}
