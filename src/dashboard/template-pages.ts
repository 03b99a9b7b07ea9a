// Templates and their preview for a chosen contact. The preview goes through
// the sender's own renderMessage (mail/message.ts): same Liquid engine, same
// variables, same HTML escaping of contact values, same caps, in the same
// untrusted pool (never on this event loop), so what is shown is what the
// contact would get, minus tracking (a preview must not mint tracking links).
import type { FastifyInstance } from 'fastify';
import { findContactByEmail } from '../contacts/queries.ts';
import { renderMessage } from '../mail/message.ts';
import { RenderFailure } from '../templates/pool-run.ts';
import { UntrustedWorkError } from '../untrusted/pool.ts';
import { findTemplate, listTemplates } from '../templates/queries.ts';
import { queryField, signedIn, user, UUID_RE } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { firstContact } from './queries.ts';
import { render } from './views.ts';
import { normalizeEmail } from '../lib/text.ts';

const PREVIEW_SEND_ID = '00000000-0000-0000-0000-000000000000';

export async function templatePages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;

  app.get('/templates', signedIn, async (request, reply) => {
    const { rows, total } = await listTemplates(db, user(request).teamId, { page: 1, perPage: 100, withContent: false });
    return render(request, reply, 'templates', { templates: rows, total });
  });

  app.get<{ Params: { id: string } }>('/templates/:id', signedIn, async (request, reply) => {
    const teamId = user(request).teamId;
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const template = await findTemplate(db, teamId, request.params.id);
    if (!template) throw pageNotFound();
    const email = normalizeEmail(queryField(request.query, 'contact', 320));
    const contact = email ? await findContactByEmail(db, teamId, email) : await firstContact(db, teamId);
    if (!contact) return render(request, reply, 'template', { template, email, missing: !!email });
    try {
      const message = await renderMessage({
        sendLogId: PREVIEW_SEND_ID,
        contact: contact as unknown as Record<string, unknown>,
        template: {
          key: `${template.id}@${template.updated_at.toISOString()}`,
          subject: template.subject,
          content: template.content,
          alt_content: template.alt_content,
        },
        account: { from_email: 'preview@plover.invalid', from_name: null },
        sendData: { open_tracking: false, click_tracking: false },
        event: null,
        campaign: null,
        // Inert links: no tracking, and the unsubscribe link points nowhere.
        links: null,
      }, { limits: config.render, team: teamId });
      return render(request, reply, 'template', { template, email: contact.email, contact, subject: message.subject, html: message.html, text: message.text });
    } catch (err) {
      // A template that fails for this contact (a cap, its budget, a bad
      // filter argument) is something to show, not a 500.
      if (!(err instanceof RenderFailure || err instanceof UntrustedWorkError)) throw err;
      return render(request, reply, 'template', { template, email: contact.email, contact, error: (err as Error).message });
    }
  });
}
