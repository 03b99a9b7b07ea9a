// Route guards and form/query readers shared by the dashboard pages. Inputs are
// read defensively (a repeated field is an array, anything may be missing), so
// no input reaches the database in a shape that could make it fail.
import type { ValidateFunction } from 'ajv';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError, detailsFromAjv, type AjvIssue, type ErrorDetail } from '../lib/errors.ts';
import { EXPIRED_FORM } from './intake.ts';
import { PageError } from './page-error.ts';
import { csrfValid } from './security.ts';
import type { SessionUser } from './users.ts';

/** preHandler: only signed-in users; others go to the sign-in page (and come back after). */
export async function requireUser(request: FastifyRequest, reply: FastifyReply) {
  if (request.dashboardUser) return;
  const next = request.method === 'GET' ? `?next=${encodeURIComponent(request.url)}` : '';
  return reply.redirect(`/sign-in${next}`, 303);
}

/** preHandler for every POST: a missing or wrong CSRF token is 403. */
export async function requireCsrf(request: FastifyRequest, _reply: FastifyReply) {
  if (csrfValid(request)) return;
  throw new PageError(403, EXPIRED_FORM);
}

export const signedIn = { preHandler: requireUser };
export const signedInPost = { preHandler: [requireUser, requireCsrf] };

export const user = (request: FastifyRequest): SessionUser => request.dashboardUser!;

/** A single string value of a form or query field; '' when absent or not a string. */
export function field(source: unknown, name: string, maxLength = 1000): string {
  const raw = (source as Record<string, unknown> | undefined)?.[name];
  const value = Array.isArray(raw) ? raw[0] : raw;
  if (typeof value !== 'string') return '';
  // NUL cannot be stored in PostgreSQL text; over-long values are not ours.
  if (value.length > maxLength || value.includes('\u0000')) throw new PageError(422, `${name} is too long or contains invalid characters`);
  return value;
}

/** Like field(), but an invalid value reads as '' (for query strings, where we just ignore junk). */
export function queryField(source: unknown, name: string, maxLength = 1000): string {
  try {
    return field(source, name, maxLength);
  } catch {
    return '';
  }
}

export { UUID_RE } from '../http/schemas.ts';

/** A safe place to return to after sign-in: a local path only (no `//host` or `/\host`). */
export function localPath(next: string): string {
  return /^\/(?![/\\])[^\s]*$/.test(next) ? next : '/';
}

/**
 * A form field as the API would get it: the string as typed (no length or NUL
 * check here: the API's own validation refuses those, with its own messages),
 * or undefined when absent.
 */
export function rawField(source: unknown, name: string): string | undefined {
  const raw = (source as Record<string, unknown> | undefined)?.[name];
  const value = Array.isArray(raw) ? raw[0] : raw;
  return typeof value === 'string' ? value : undefined;
}

/** Every value of a repeated field (checkboxes): one gives a string, several an array. */
export function fieldList(source: unknown, name: string, max = 1000): string[] {
  const raw = (source as Record<string, unknown> | undefined)?.[name];
  const list = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
  return list.filter((e): e is string => typeof e === 'string').slice(0, max);
}

/** A whole-number field for a JSON body: digits become a number; anything else stays text, so the API's schema names it. */
export function numberField(source: unknown, name: string): number | string | undefined {
  const value = rawField(source, name)?.trim();
  if (value === undefined || value === '') return undefined;
  return /^-?\d{1,15}$/.test(value) ? Number(value) : value;
}

/**
 * The API's schema check of a body built from a form: the same validator and
 * the same error details (field and message) as the JSON route answers with.
 */
export function schemaDetails(validate: ValidateFunction, body: unknown): ErrorDetail[] {
  return validate(body) ? [] : detailsFromAjv((validate.errors ?? []) as AjvIssue[], 'body');
}

/** The details of a validation error thrown by a shared create or update function, else undefined. */
export function validationDetails(err: unknown): ErrorDetail[] | undefined {
  if (err instanceof AppError && err.code === 'VALIDATION_FAILED') return err.details ?? [{ field: '', message: err.message }];
  return undefined;
}
