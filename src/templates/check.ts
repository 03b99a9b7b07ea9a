// Template create's checks, run in the untrusted pool (templates/render-tasks.ts
// does the work): Liquid syntax with its line, the caps of lib/render-limits.ts, a trial
// render, and the derived alt_content. A template that runs over its time or
// memory budget while being checked is refused like one over a cap.
import { AppError, type ErrorDetail } from '../lib/errors.ts';
import { RenderFailure, runTemplateTask } from './pool-run.ts';
import { untrustedPool, UntrustedWorkError, type UntrustedPool } from '../untrusted/pool.ts';
import type { CheckTemplateInput, CheckTemplateResult, TemplateField } from './render-tasks.ts';
import { DEFAULT_RENDER_LIMITS, type RenderLimits } from '../lib/render-limits.ts';

export async function checkTemplate(
  fields: Partial<Record<TemplateField, string>>,
  opts: { deriveAlt: boolean; limits?: RenderLimits; pool?: UntrustedPool; team?: string },
): Promise<{ details: ErrorDetail[]; altContent?: string }> {
  const limits = opts.limits ?? DEFAULT_RENDER_LIMITS;
  const input: CheckTemplateInput = { fields, deriveAlt: opts.deriveAlt, limits };
  try {
    return await runTemplateTask<CheckTemplateResult>(opts.pool ?? untrustedPool(), 'checkTemplate', input, 2 * limits.parseBudgetMs + limits.renderBudgetMs, opts.team);
  } catch (err) {
    if (err instanceof RenderFailure) return { details: [{ field: 'content', message: `${err.message} while being checked` }] };
    if (err instanceof UntrustedWorkError) {
      throw new AppError('SERVICE_UNAVAILABLE', 'too many templates are being checked; try again shortly', undefined, { 'retry-after': '1' });
    }
    throw err;
  }
}
