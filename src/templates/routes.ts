// Templates API (docs/api.md, "Templates"): create, list, get, update (a new version), delete.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { AppError, notFound, validationFailed } from '../lib/errors.ts';
import { Ok, pageMeta, rejectInvalidId, withErrors } from '../http/schemas.ts';
import { deleteTemplate, findTemplate, insertTemplate, listTemplates, type TemplateRow } from './queries.ts';
import { checkTemplateInput } from './validate.ts';
import { nulCharacters, TEMPLATE_VERSIONS_KEPT, updateTemplate } from './manage.ts';
import {
  CreateTemplateBody,
  ListTemplatesQuery,
  TemplateIdParams,
  TemplateListResponse,
  TemplateResponse,
  UpdateTemplateBody,
} from './schemas.ts';

function toListItem(row: TemplateRow) {
  return {
    id: row.id,
    team_id: row.team_id,
    name: row.name,
    subject: row.subject,
    content_type: row.content_type,
    scope: row.scope,
    status: row.status,
    meta: { json_schema: row.meta?.json_schema ?? '', tags: row.meta?.tags ?? [] },
    version: row.version,
    ...(row.content !== undefined ? { content: row.content, alt_content: row.alt_content ?? '' } : {}),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

function toTemplate(row: Required<TemplateRow>) {
  return { ...toListItem(row), content: row.content, alt_content: row.alt_content };
}

/**
 * The id routes validate their parameter with attachValidation: an id that is
 * not a UUID names no template of this team, so it is a 404 like any other
 * unknown id (not a 422, and never a database error).
 */

export const templatesRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '',
    {
      schema: {
        tags: ['templates'],
        summary: 'Create a template',
        description:
          'Creates a private HTML template. `content`, `subject` and `alt_content` are Liquid templates, checked at create time ' +
          '(a syntax error is 422 with its line). A template over a rendering limit (output size, counting `capture` and ' +
          '`assign`; loop iterations and range size; nesting; time) is 422 naming the field. `alt_content` is derived from ' +
          '`content` when absent.',
        body: CreateTemplateBody,
        response: withErrors({ 201: TemplateResponse }, [503]),
      },
    },
    async (request, reply) => {
      const body = request.body;
      const { details, altContent } = await checkTemplateInput(body, { limits: app.deps.config.render, team: request.auth!.teamId });
      if (details.length) throw validationFailed(details);

      const row = await insertTemplate(app.deps.db, request.auth!.teamId, {
        name: body.name.trim(),
        subject: body.subject ?? null,
        content: body.content,
        alt_content: altContent,
        meta: { json_schema: body.meta?.json_schema ?? '', tags: body.meta?.tags ?? [] },
      });
      return reply.code(201).send({ ok: true as const, template: toTemplate(row) });
    },
  );

  app.get(
    '',
    {
      schema: {
        tags: ['templates'],
        summary: 'List templates',
        description:
          "The team's active templates, newest first. `content` and `alt_content` only with `include[]=content`.",
        querystring: ListTemplatesQuery,
        response: withErrors({ 200: TemplateListResponse }),
      },
    },
    async (request) => {
      const q = request.query;
      const page = q.page ?? 1;
      const perPage = q.per_page ?? 20;
      const include = [...(q['include[]'] ?? []), ...(q.include ?? [])];
      const bad = nulCharacters({ search: q.search });
      if (bad.length) throw validationFailed(bad, 'invalid querystring');
      const { rows, total } = await listTemplates(app.deps.db, request.auth!.teamId, {
        page,
        perPage,
        search: q.search || undefined,
        withContent: include.includes('content'),
      });
      return { ok: true as const, templates: { data: rows.map(toListItem) }, meta: pageMeta(page, perPage, total) };
    },
  );

  app.get(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['templates'],
        summary: 'Get a template',
        description: 'One template of the team, with its content.',
        params: TemplateIdParams,
        response: withErrors({ 200: TemplateResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'template');
      const row = await findTemplate(app.deps.db, request.auth!.teamId, request.params.id);
      if (!row) throw notFound('template');
      return { ok: true as const, template: toTemplate(row) };
    },
  );

  app.patch(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['templates'],
        summary: 'Update a template',
        description:
          'Changes any field of create (at least one). Checked as at create: Liquid syntax (422 with the line), the rendering ' +
          'limits, NUL characters, a blank name. A change makes a new `version` (earlier versions are kept, the last ' +
          `${TEMPLATE_VERSIONS_KEPT}); messages sent from then on, queued ones included, use it: campaigns pick it up at their next send. ` +
          'When `content` changes and `alt_content` is absent, `alt_content` is derived again from the new content. ' +
          'A patch that changes nothing leaves the version as it is.',
        params: TemplateIdParams,
        body: UpdateTemplateBody,
        response: withErrors({ 200: TemplateResponse }, [404, 503]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'template');
      const row = await updateTemplate(app.deps.db, request.auth!.teamId, request.params.id, request.body, { limits: app.deps.config.render });
      return { ok: true as const, template: toTemplate(row) };
    },
  );

  app.delete(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['templates'],
        summary: 'Delete a template',
        description: 'Deletes the template for good. 409 while an active or paused campaign uses it.',
        params: TemplateIdParams,
        response: withErrors({ 200: Ok }, [404, 409]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'template');
      const result = await deleteTemplate(app.deps.db, request.auth!.teamId, request.params.id);
      if (result === 'not_found') throw notFound('template');
      if (result === 'in_use') {
        throw new AppError('CONFLICT', 'the template is used by an active or paused campaign; stop or complete the campaign first');
      }
      return { ok: true as const };
    },
  );
};
