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

export type AjvIssue = { instancePath: string; keyword: string; message?: string; params: Record<string, unknown>; schemaPath?: string };

/** At most this many allowed values are listed in one message (event catalogs are the longest lists). */
const MAX_LISTED_VALUES = 60;

function listValues(values: unknown[]): string {
  const shown = values.slice(0, MAX_LISTED_VALUES).map((v) => (typeof v === 'string' ? v : JSON.stringify(v)));
  return shown.join(', ') + (values.length > MAX_LISTED_VALUES ? `, … (${values.length - MAX_LISTED_VALUES} more)` : '');
}

/**
 * ajv says "must be equal to one of the allowed values" (enum) and, for a
 * union of literals, one "must be equal to constant" per literal plus "must
 * match a schema in anyOf". Both become one message that lists the values.
 * Returns the message per instance path of such a union, whose const issues
 * are then dropped.
 */
function literalUnions(issues: AjvIssue[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const any of issues) {
    if (any.keyword !== 'anyOf') continue;
    const prefix = `${any.schemaPath ?? ''}/`;
    const branches = issues.filter((e) => e !== any && e.instancePath === any.instancePath && (e.schemaPath ?? '').startsWith(prefix));
    if (branches.length === 0 || !branches.every((e) => e.keyword === 'const' || e.keyword === 'enum')) continue;
    const values = branches.flatMap((e) => (e.keyword === 'const' ? [e.params.allowedValue] : ((e.params.allowedValues as unknown[]) ?? [])));
    out.set(any.instancePath, `must be one of: ${listValues(values)}`);
  }
  return out;
}

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
  const unions = literalUnions(issues);
  for (const e of issues) {
    if (skip(e.instancePath)) continue;
    let field = fieldPath(e.instancePath);
    let message = e.message ?? 'is invalid';
    const union = unions.get(e.instancePath);
    if (union !== undefined && (e.keyword === 'const' || e.keyword === 'enum')) continue;
    if (union !== undefined && e.keyword === 'anyOf') {
      message = union;
    } else if (e.keyword === 'enum' && Array.isArray(e.params.allowedValues)) {
      message = `must be one of: ${listValues(e.params.allowedValues)}`;
    } else if (e.keyword === 'const') {
      message = `must be ${listValues([e.params.allowedValue])}`;
    } else if (e.keyword === 'required') {
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
