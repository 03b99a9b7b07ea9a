// Domain errors: what went wrong, in the words of the contract's error codes.
// Feature modules throw these; the HTTP edge (http/errors.ts) alone knows which
// status each code answers with, so a CLI or a task can throw and catch them
// without pulling in Fastify.

export const ERROR_CODES = [
  'UNAUTHORIZED',
  'NOT_FOUND',
  'METHOD_NOT_ALLOWED',
  'CONFLICT',
  'PAYLOAD_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
  'VALIDATION_FAILED',
  'MAX_WEBHOOKS_EXCEEDED',
  'RECIPIENT_SUPPRESSED',
  'RATE_LIMITED',
  'INTERNAL_SERVER_ERROR',
  'SERVICE_UNAVAILABLE',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];
export type ErrorDetail = { field: string; message: string };

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetail[] | undefined;
  /** Extra answer headers (Retry-After on RATE_LIMITED); the edge sends them. */
  readonly headers: Record<string, string> | undefined;
  constructor(code: ErrorCode, message: string, details?: ErrorDetail[], headers?: Record<string, string>) {
    super(message);
    this.code = code;
    this.details = details;
    this.headers = headers;
  }
}

export const notFound = (what = 'resource') => new AppError('NOT_FOUND', `${what} not found`);
export const validationFailed = (details: ErrorDetail[], message = 'request validation failed') =>
  new AppError('VALIDATION_FAILED', message, details);

/** `/contacts/12/email` → `contacts[12].email` (the field notation of the contract). */
export function fieldPath(instancePath: string, extra?: string): string {
  const parts = instancePath.split('/').filter(Boolean).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (extra !== undefined) parts.push(extra);
  let out = '';
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out ? `.${p}` : p;
  return out;
}

export type AjvIssue = { instancePath: string; keyword: string; message?: string; params: Record<string, unknown> };

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

/** Schema-validator issues as the error envelope's details, one per field and message. */
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
