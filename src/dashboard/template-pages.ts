// Templates: list, create and edit in an editor with a live preview, and a
// template's page with its preview. Saving runs the API's own checks: create
// those of POST /email/templates (CreateTemplateBody's schema, then
// templates/validate.ts: NUL characters, blank name, one-line subject, Liquid
// syntax with its line, the render caps and a trial render, in the untrusted
// pool), edit those of PATCH /email/templates/{id} (updateTemplate, which makes
// a new version), so the editor refuses exactly what the API refuses, with the
// same messages. The preview
// (preview.ts) renders through the sender's renderMessage in the same pool.
// These routes take the template body limit (http/intake.ts), not the 64 KiB
// of other forms.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { compileBodyValidator } from '../http/schemas.ts';
import type { ErrorDetail } from '../lib/errors.ts';
import { CreateTemplateBody } from '../templates/schemas.ts';
import { findTemplate, insertTemplate, listTemplates } from '../templates/queries.ts';
import { updateTemplate } from '../templates/manage.ts';
import { checkTemplateInput, type TemplateInput } from '../templates/validate.ts';
import { queryField, rawField, schemaDetails, signedIn, signedInPost, user, UUID_RE, validationDetails } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { readSample, renderPreview, SAMPLE_EVENTS, type PreviewResult, type SampleInput } from './preview.ts';
import { render } from './views.ts';

type IdParams = { Params: { id: string } };
type EditorForm = { name: string; subject: string; content: string; alt_content: string };

const validateBody = compileBodyValidator(CreateTemplateBody);

const MESSAGES: Record<string, string> = {
  created: 'Template created.',
  saved: 'Template saved: campaigns that use it send the new version from now on.',
};

/** The editor's fields as typed. */
function readEditor(body: unknown): EditorForm {
  return {
    name: rawField(body, 'name') ?? '',
    subject: rawField(body, 'subject') ?? '',
    content: rawField(body, 'content') ?? '',
    alt_content: rawField(body, 'alt_content') ?? '',
  };
}

/** The JSON body the API would get from this form: an empty subject or text part is left out (no subject; derived text). */
function apiBody(form: EditorForm): Record<string, unknown> {
  return {
    name: form.name,
    content: form.content,
    content_type: 'html',
    ...(form.subject !== '' ? { subject: form.subject } : {}),
    ...(form.alt_content !== '' ? { alt_content: form.alt_content } : {}),
  };
}

export async function templatePages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;

  /** Every problem with the form, as the API would list it, and the text part to store. */
  async function check(teamId: string, form: EditorForm): Promise<{ body: TemplateInput; details: ErrorDetail[]; altContent: string }> {
    const body = apiBody(form);
    const details = schemaDetails(validateBody, body);
    if (details.length) return { body: body as TemplateInput, details, altContent: '' };
    const checked = await checkTemplateInput(body as TemplateInput, { limits: config.render, team: teamId });
    return { body: body as TemplateInput, ...checked };
  }

  async function findOwn(request: FastifyRequest<IdParams>) {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const template = await findTemplate(db, user(request).teamId, request.params.id.toLowerCase());
    if (!template) throw pageNotFound();
    return template;
  }

  const preview = (teamId: string, form: EditorForm, sample: SampleInput): Promise<PreviewResult> =>
    renderPreview(db, teamId, { subject: form.subject || null, content: form.content, alt_content: form.alt_content }, sample, config.render);

  function editor(
    request: FastifyRequest,
    reply: FastifyReply,
    data: { template?: { id: string; name: string }; form: EditorForm; sample: SampleInput; errors?: ErrorDetail[]; preview?: PreviewResult },
    status = 200,
  ) {
    const base = data.template ? `/templates/${data.template.id}` : '/templates';
    return render(
      request,
      reply,
      'template-form',
      {
        ...data,
        action: data.template ? `${base}/edit` : base,
        previewAction: data.template ? `${base}/preview` : '/templates/preview',
        events: SAMPLE_EVENTS,
      },
      status,
    );
  }

  app.get('/templates', signedIn, async (request, reply) => {
    const { rows, total } = await listTemplates(db, user(request).teamId, { page: 1, perPage: 100, withContent: false });
    return render(request, reply, 'templates', { templates: rows, total });
  });

  app.get('/templates/new', signedIn, async (request, reply) => {
    const form: EditorForm = { name: '', subject: '', content: '', alt_content: '' };
    return editor(request, reply, { form, sample: readSample({}) });
  });

  // The preview of an unsaved template; the editor's "Preview" button (and, with JavaScript, every pause in typing).
  app.post('/templates/preview', signedInPost, async (request, reply) => {
    const form = readEditor(request.body);
    const sample = readSample(request.body);
    return editor(request, reply, { form, sample, preview: await preview(user(request).teamId, form, sample) });
  });

  app.post('/templates', signedInPost, async (request, reply) => {
    const teamId = user(request).teamId;
    const form = readEditor(request.body);
    const sample = readSample(request.body);
    const { body, details, altContent } = await check(teamId, form);
    if (details.length) return editor(request, reply, { form, sample, errors: details }, 422);
    const row = await insertTemplate(db, teamId, {
      name: body.name.trim(),
      subject: body.subject ?? null,
      content: body.content,
      alt_content: altContent,
      meta: { json_schema: '', tags: [] },
    });
    return reply.redirect(`/templates/${row.id}?done=created`, 303);
  });

  app.get<IdParams>('/templates/:id', signedIn, async (request, reply) => {
    const template = await findOwn(request);
    const sample = readSample(request.query);
    const result = await renderPreview(db, user(request).teamId, template, sample, config.render);
    return render(request, reply, 'template', {
      template,
      sample,
      events: SAMPLE_EVENTS,
      preview: result,
      message: MESSAGES[queryField(request.query, 'done', 20)],
    });
  });

  app.get<IdParams>('/templates/:id/edit', signedIn, async (request, reply) => {
    const template = await findOwn(request);
    const form: EditorForm = { name: template.name, subject: template.subject ?? '', content: template.content, alt_content: template.alt_content };
    const sample = readSample({});
    return editor(request, reply, { template, form, sample, preview: await preview(user(request).teamId, form, sample) });
  });

  app.post<IdParams>('/templates/:id/preview', signedInPost, async (request, reply) => {
    const template = await findOwn(request);
    const form = readEditor(request.body);
    const sample = readSample(request.body);
    // As saving will: an untouched text part is derived again from the HTML.
    const shown = form.alt_content === template.alt_content ? { ...form, alt_content: '' } : form;
    return editor(request, reply, { template, form, sample, preview: await preview(user(request).teamId, shown, sample) });
  });

  app.post<IdParams>('/templates/:id/edit', signedInPost, async (request, reply) => {
    const template = await findOwn(request);
    const form = readEditor(request.body);
    const sample = readSample(request.body);
    // The PATCH the API would get: every field; an empty subject removes it. The
    // text part goes only when the user changed it: left as it was (or emptied),
    // it is derived again from new HTML, as PATCH does without alt_content.
    const patch: Record<string, unknown> = {
      name: form.name,
      subject: form.subject === '' ? null : form.subject,
      content: form.content,
      ...(form.alt_content !== '' && form.alt_content !== template.alt_content ? { alt_content: form.alt_content } : {}),
    };
    try {
      await updateTemplate(db, user(request).teamId, template.id, patch, { limits: config.render });
    } catch (err) {
      const errors = validationDetails(err);
      if (!errors) throw err;
      return editor(request, reply, { template, form, sample, errors }, 422);
    }
    return reply.redirect(`/templates/${template.id}?done=saved`, 303);
  });
}
