// Schemas shared by every feature: the error responses each route documents,
// pagination, and the validator compilers.
import { Ajv, type Options } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyRequest, FastifySchemaCompiler } from 'fastify';
import { Type, type Static, type TSchema } from 'typebox';
import { detailsFromAjv, ErrorBody, notFound, validationFailed } from './errors.ts';

const base: Options = { allErrors: true, strict: false, useDefaults: true, removeAdditional: false };
// Bodies are JSON and must carry the right types; only the query string and path
// (always text) are coerced.
const bodyAjv = addFormats.default(new Ajv({ ...base, coerceTypes: false }));
const textAjv = addFormats.default(new Ajv({ ...base, coerceTypes: 'array' }));

// E-mail addresses are trimmed and lower-cased before storage (docs/api.md, "Identifiers, times, strings"),
// so the format accepts surrounding spaces and any case.
const EMAIL_RE =
  /^(?=.{3,254}$)(?=[^@]{1,64}@)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z][A-Za-z0-9-]{0,62}$/;
export const isEmail = (s: string): boolean => EMAIL_RE.test(s.trim());

/**
 * ISO 3166-1 alpha-2 codes Intl knows (it echoes unknown codes back, or says
 * "Unknown Region"), found once: asking Intl for every contact was a quarter of
 * a 1,000-contact bulk upsert's validation time.
 */
const COUNTRY_CODES: ReadonlySet<string> = (() => {
  const regionNames = new Intl.DisplayNames(['en'], { type: 'region' });
  const codes = new Set<string>();
  for (let a = 65; a <= 90; a++) {
    for (let b = 65; b <= 90; b++) {
      const code = String.fromCharCode(a, b);
      const name = regionNames.of(code);
      if (name !== undefined && name !== code && name !== 'Unknown Region') codes.add(code);
    }
  }
  return codes;
})();
/** ISO 3166-1 alpha-2, any case (ASCII letters only: 'ıs' upper-cases to 'IS'). */
export function isCountryCode(s: string): boolean {
  return /^[A-Za-z]{2}$/.test(s) && COUNTRY_CODES.has(s.toUpperCase());
}

// ajv-formats' date-time takes what PostgreSQL's timestamptz refuses: year
// 0000 (there is no year 0; 22008) and offsets past ±15:59 (22009). Those
// reached the database as a 500 (found by the contract fuzz); a 422 here.
const OFFSET_RE = /([+-])(\d{2}):?(\d{2})$/;
export function isStorableDateTime(s: string): boolean {
  if (s.startsWith('0000')) return false;
  const offset = OFFSET_RE.exec(s.slice(19));
  return !offset || Number(offset[2]) <= 15;
}

const DATE_TIME_PARTS = /^(\d{4}-\d{2}-\d{2})[Tt\s](\d{2}:\d{2}:\d{2})(\.\d+)?(?:([Zz])|([+-]\d{2})(?::?(\d{2}))?)$/;

/**
 * A validated date-time as a Date. A leap second (`23:59:60Z`) is valid RFC 3339
 * and PostgreSQL takes it (as the next second), but JavaScript's Date cannot
 * hold it (NaN: the webhook recover route answered 500, found by the contract
 * fuzz): it becomes the next second here too. The value is first respelt in the
 * one form Date.parse reads for everything the date-time format admits: an
 * offset of hours alone (`+01`) was NaN, an Invalid Date, and a 500 where it
 * was written (a schedule, a recover window).
 */
export function dateTimeValue(s: string): Date {
  const m = DATE_TIME_PARTS.exec(s);
  const iso = m ? `${m[1]}T${m[2]}${m[3] ?? ''}${m[4] ? 'Z' : `${m[5]}:${m[6] ?? '00'}`}` : s;
  const t = Date.parse(iso);
  if (!Number.isNaN(t)) return new Date(t);
  return new Date(Date.parse(iso.replace(/:60(?=[.,Zz+-]|$)/, ':59')) + 1000);
}

for (const ajv of [bodyAjv, textAjv]) {
  ajv.addFormat('contact-email', { type: 'string', validate: isEmail });
  ajv.addFormat('country-code', { type: 'string', validate: isCountryCode });
  const dateTime = ajv.formats['date-time'] as { validate: (s: string) => boolean; compare: (a: string, b: string) => number | undefined };
  ajv.addFormat('date-time', { type: 'string', validate: (s: string) => dateTime.validate(s) && isStorableDateTime(s), compare: dateTime.compare });
}

export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) =>
  (httpPart === 'body' ? bodyAjv : textAjv).compile(schema as object) as ReturnType<FastifySchemaCompiler<TSchema>>;

/** The API's body validator for one schema, for input that arrives another way (a CSV row). */
export const compileBodyValidator = (schema: TSchema) => bodyAjv.compile(schema as object);

/**
 * A checker of unchecked input (a dashboard form, a CLI) against a route's body
 * schema, with the API's rules and messages: returns the input typed, or throws
 * 422 VALIDATION_FAILED listing every problem. Defaults of the schema are filled in.
 */
export function bodyChecker<T extends TSchema>(schema: T): (input: unknown) => Static<T> {
  const check = bodyAjv.compile(schema as object);
  return (input) => {
    if (!check(input)) throw validationFailed(detailsFromAjv(check.errors ?? [], 'body'));
    return input as Static<T>;
  };
}

const errorResponse = (description: string) => ({ ...ErrorBody, description });

/** The error responses every authenticated route can give, plus any route-specific ones. */
export function withErrors<T extends Record<number, unknown>>(ok: T, extra: number[] = []) {
  const out: Record<number, unknown> = { ...ok };
  const describe: Record<number, string> = {
    401: 'Missing, unknown or revoked API key',
    404: 'Not found (or belongs to another team)',
    405: 'Method not allowed',
    409: 'Conflict',
    413: 'Request body too large',
    415: 'Unsupported Content-Type',
    422: 'Validation failed',
    429: 'Rate limit exceeded',
    500: 'Internal server error',
    503: 'Service unavailable',
  };
  for (const code of [401, 422, 429, 500, ...extra]) out[code] = errorResponse(describe[code] ?? 'Error');
  return out as T;
}

export const Ok = Type.Object({ ok: Type.Literal(true) });

/** A schema that also accepts null, as a JSON-Schema type array (clearer errors than anyOf). */
export function nullable<T extends TSchema>(schema: T) {
  const s = schema as unknown as { type: string };
  return Type.Unsafe<Static<T> | null>({ ...schema, type: [s.type, 'null'] });
}

/** A string-or-null output field (fast serialization, no anyOf). */
export const StringOrNull = Type.Unsafe<string | null>({ type: ['string', 'null'] });

export const DateTime = Type.String({ format: 'date-time' });

export const PageMeta = Type.Object({
  current_page: Type.String(),
  per_page: Type.Integer(),
  total: Type.String(),
  last_page: Type.String(),
});

export function pageQuery<E extends Record<string, TSchema>>(defaultPerPage: number, extra: E = {} as E) {
  return Type.Object(
    {
      // The upper bound keeps OFFSET within what PostgreSQL accepts (page=1e20 was a 500).
      page: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 })),
      per_page: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: defaultPerPage })),
      ...extra,
    },
    { additionalProperties: true },
  );
}

export function pageMeta(page: number, perPage: number, total: number) {
  return {
    current_page: String(page),
    per_page: perPage,
    total: String(total),
    last_page: String(Math.max(1, Math.ceil(total / perPage))),
  };
}

export { UUID_PATTERN, UUID_RE } from '../lib/uuid.ts';

/**
 * For routes with `attachValidation`: a malformed path id names nothing of this
 * team, so it is a 404 like any unknown id; other validation errors stand.
 */
export function rejectInvalidId(request: FastifyRequest, what: string): void {
  const err = request.validationError;
  if (!err) return;
  if ((err as { validationContext?: string }).validationContext === 'params') throw notFound(what);
  throw err;
}
