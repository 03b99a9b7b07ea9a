// Template checks shared by create and update, and the update itself, for the
// API and the dashboard alike. Errors are the domain errors of lib/errors.ts
// (404, 422): each caller maps them to its own answer.
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { notFound, validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { bodyChecker } from '../http/schemas.ts';
import type { RenderLimits } from '../lib/render-limits.ts';
import type { UntrustedPool } from '../untrusted/pool.ts';
import { checkTemplate } from './check.ts';
import { FULL_COLUMNS, WRITTEN_COLUMNS, type TemplateRow } from './queries.ts';
import { UpdateTemplateBody, type TemplatePatch } from './schemas.ts';

/** Earlier versions kept per template (template_versions); older ones are dropped at the next update. */
export const TEMPLATE_VERSIONS_KEPT = 20;

/** PostgreSQL text cannot hold U+0000; JSON can. Refused as a 422 instead of failing in the database (a 500). */
export function nulCharacters(fields: Record<string, string | null | undefined>): ErrorDetail[] {
  return Object.entries(fields)
    .filter(([, value]) => typeof value === 'string' && value.includes('\u0000'))
    .map(([field]) => ({ field, message: 'must not contain NUL (U+0000) characters' }));
}

type TemplateFieldsInput = {
  name?: string;
  subject?: string | null;
  content?: string;
  alt_content?: string;
  meta?: { json_schema?: string; tags?: string[] };
};

/** The checks create and update share that need no pool: NUL characters, a blank name, a subject of one line. */
export function templateFieldProblems(body: TemplateFieldsInput): ErrorDetail[] {
  const details = nulCharacters({
    name: body.name,
    content: body.content,
    subject: body.subject,
    alt_content: body.alt_content,
    'meta.json_schema': body.meta?.json_schema,
    ...Object.fromEntries((body.meta?.tags ?? []).map((tag, i) => [`meta.tags[${i}]`, tag])),
  });
  if (body.name !== undefined && body.name.trim() === '') details.push({ field: 'name', message: 'must not be blank' });
  if (typeof body.subject === 'string' && /[\r\n]/.test(body.subject)) details.push({ field: 'subject', message: 'must be one line' });
  return details;
}

export type TemplateCheckOptions = { limits: RenderLimits; pool?: UntrustedPool };

const checkPatch = bodyChecker(UpdateTemplateBody);

/**
 * Updates a template of the team: a new version when anything changes. The
 * patch is checked as create checks a template (the schema's caps, NUL
 * characters, Liquid syntax and the rendering caps in the untrusted pool, a
 * trial render) before anything is written; `alt_content` is derived again
 * from a new `content` unless given. Sends render the template when they go
 * out, so every message sent after the commit uses the new version, queued
 * ones included. Throws 404 (unknown id, another team's) or 422.
 */
export async function updateTemplate(
  db: Db,
  teamId: string,
  id: string,
  input: unknown,
  opts: TemplateCheckOptions,
): Promise<Required<TemplateRow>> {
  const patch: TemplatePatch = checkPatch(input);
  // Before the costly check; the content is read once, locked, below.
  const exists = await db.selectFrom('templates').select('id').where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
  if (!exists) throw notFound('template');
  const details = templateFieldProblems(patch);
  const fields: { content?: string; subject?: string; alt_content?: string } = {};
  if (patch.content !== undefined) fields.content = patch.content;
  if (typeof patch.subject === 'string') fields.subject = patch.subject;
  if (patch.alt_content !== undefined) fields.alt_content = patch.alt_content;
  let derivedAlt: string | undefined;
  if (Object.keys(fields).length > 0) {
    // Parse, caps, trial render and alt_content derivation: in the untrusted pool, off this event loop.
    const checked = await checkTemplate(fields, { deriveAlt: patch.content !== undefined, limits: opts.limits, pool: opts.pool, team: teamId });
    details.push(...checked.details);
    derivedAlt = checked.altContent;
  }
  if (details.length) throw validationFailed(details, 'invalid template');

  return db.transaction().execute(async (tx) => {
    const current = await tx.selectFrom('templates').select(FULL_COLUMNS).where('team_id', '=', teamId).where('id', '=', id).forUpdate().executeTakeFirst();
    if (!current) throw notFound('template');
    const next = {
      name: patch.name?.trim() ?? current.name,
      subject: patch.subject === undefined ? current.subject : patch.subject,
      content: patch.content ?? current.content,
      alt_content: patch.alt_content ?? (patch.content !== undefined ? (derivedAlt ?? '') : current.alt_content),
      meta: patch.meta
        ? { json_schema: patch.meta.json_schema ?? current.meta.json_schema ?? '', tags: patch.meta.tags ?? current.meta.tags ?? [] }
        : current.meta,
    };
    const changed =
      next.name !== current.name ||
      next.subject !== current.subject ||
      next.content !== current.content ||
      next.alt_content !== current.alt_content ||
      JSON.stringify(next.meta) !== JSON.stringify(current.meta);
    if (!changed) return current;
    // The version being replaced is kept, then the row becomes the new one.
    await sql`
      INSERT INTO template_versions (template_id, team_id, version, name, subject, content, alt_content, meta, created_at)
      SELECT id, team_id, version, name, subject, content, alt_content, meta, updated_at
        FROM templates WHERE id = ${id} AND team_id = ${teamId}
      ON CONFLICT (template_id, version) DO NOTHING`.execute(tx);
    await sql`
      DELETE FROM template_versions
       WHERE template_id = ${id} AND version <= ${current.version - TEMPLATE_VERSIONS_KEPT}::int`.execute(tx);
    return tx
      .updateTable('templates')
      .set({
        name: next.name,
        subject: next.subject,
        content: next.content,
        alt_content: next.alt_content,
        meta: JSON.stringify(next.meta),
        version: sql<number>`version + 1`,
        updated_at: sql<Date>`now()`,
      })
      .where('team_id', '=', teamId)
      .where('id', '=', id)
      .returning(WRITTEN_COLUMNS)
      .executeTakeFirstOrThrow()
      .then((row) => ({ ...row, content: next.content, alt_content: next.alt_content }));
  });
}
