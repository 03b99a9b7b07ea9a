// Templates and their preview, rendered for a chosen contact with the same
// engine and variables shape the sender uses (templates/render.ts).
import type { FastifyInstance } from 'fastify';
import { findContactByEmail } from '../contacts/queries.ts';
import { contactView } from '../contacts/view.ts';
import { renderTemplate } from '../templates/render.ts';
import { findTemplate, listTemplates } from '../templates/queries.ts';
import { queryField, signedIn, user, UUID_RE } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { firstContact } from './queries.ts';
import { render } from './views.ts';

async function safeRender(text: string, variables: Record<string, unknown>): Promise<{ text: string; error?: string }> {
  try {
    return { text: await renderTemplate(text, variables) };
  } catch (err) {
    // A template that fails for this contact is something to show, not a 500.
    return { text: '', error: (err as Error).message };
  }
}

export async function templatePages(app: FastifyInstance): Promise<void> {
  const { db } = app.deps;

  app.get('/templates', signedIn, async (request, reply) => {
    const { rows, total } = await listTemplates(db, user(request).teamId, { page: 1, perPage: 100, withContent: false });
    return render(request, reply, 'templates', { templates: rows, total });
  });

  app.get<{ Params: { id: string } }>('/templates/:id', signedIn, async (request, reply) => {
    const teamId = user(request).teamId;
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const template = await findTemplate(db, teamId, request.params.id);
    if (!template) throw pageNotFound();
    const email = queryField(request.query, 'contact', 320).trim().toLowerCase();
    const contact = email ? await findContactByEmail(db, teamId, email) : await firstContact(db, teamId);
    if (!contact) {
      return render(request, reply, 'template', { template, email, missing: !!email });
    }
    const variables = { contact: contactView(contact), unsubscribe_url: '#unsubscribe (preview)' };
    const [subject, html] = await Promise.all([safeRender(template.subject ?? '', variables), safeRender(template.content, variables)]);
    return render(request, reply, 'template', { template, email: contact.email, contact, subject, html });
  });
}
