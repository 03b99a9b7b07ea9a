// The checks of a new template beyond its schema, shared by the API's create
// route and the dashboard's editor so both refuse the same input with the same
// messages: NUL characters, a blank name, a multi-line subject (manage.ts, the
// checks update shares), then the Liquid
// checks of check.ts (syntax with its line, the render caps, a trial render) in
// the untrusted pool, with alt_content derived when absent.
import type { Static } from 'typebox';
import type { ErrorDetail } from '../lib/errors.ts';
import type { RenderLimits } from '../lib/render-limits.ts';
import { checkTemplate } from './check.ts';
import { templateFieldProblems } from './manage.ts';
import type { CreateTemplateBody } from './schemas.ts';

export type TemplateInput = Static<typeof CreateTemplateBody>;

/**
 * Every problem of a schema-valid template body (empty when none), and the
 * alt_content to store (derived from content when the body has none).
 */
export async function checkTemplateInput(
  body: TemplateInput,
  opts: { limits: RenderLimits; team: string },
): Promise<{ details: ErrorDetail[]; altContent: string }> {
  const details: ErrorDetail[] = templateFieldProblems(body);
  // Parse, caps, trial render and alt_content derivation: in the untrusted pool, off this event loop.
  const checked = await checkTemplate(
    { content: body.content, subject: body.subject, alt_content: body.alt_content },
    { deriveAlt: true, limits: opts.limits, team: opts.team },
  );
  details.push(...checked.details);
  return { details, altContent: checked.altContent ?? body.alt_content ?? '' };
}
