// Contacts: e-mail prefix search with keyset paging, and one contact's fields,
// tags, status, activity counts and latest messages.
import type { FastifyInstance } from 'fastify';
import type { Db } from '../db/pool.ts';
import { CONTACT_FIELDS } from '../contacts/fields.ts';
import { contactTimeline, type TimelineOrder } from '../contacts/timeline.ts';
import { AppError } from '../lib/errors.ts';
import { describeItem } from './contact-timeline-view.ts';
import { queryField, signedIn, user, UUID_RE } from './forms.ts';
import { PageError, pageNotFound } from './page-error.ts';
import { contactPage, CONTACTS_PER_PAGE, findContact } from './queries.ts';
import { render, when } from './views.ts';

const ACTIVITY = [
  ['Sent', 'sent_count', 'last_sent_at'],
  ['Opens', 'opens_count', 'last_opened_at'],
  ['Clicks', 'clicks_count', 'last_clicked_at'],
  ['Leads', 'leads_count', 'last_lead_at'],
  ['Sales', 'sales_count', 'last_sale_at'],
  ['Hard bounces', 'hard_bounces_count', 'last_bounced_at'],
  ['Soft bounces', 'soft_bounces_count', 'last_bounced_at'],
] as const;

export const CONTACT_MESSAGES = 20;
export const TIMELINE_PER_PAGE = 25;

/**
 * The contact's latest messages with their counted opens and clicks beside the
 * raw hits (every fetch of the pixel or a link, counted or not: a replay or a
 * scanner shows up as many hits and one count). email_send_log_contact_idx.
 */
export async function contactMessages(db: Db, teamId: string, contactId: string) {
  return db
    .selectFrom('email_send_log')
    .select(['id', 'subject', 'status', 'sent_at', 'created_at', 'opens_count', 'open_hits_count', 'clicks_count', 'click_hits_count'])
    .where('team_id', '=', teamId)
    .where('contact_id', '=', contactId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(CONTACT_MESSAGES)
    .execute();
}

export async function contactPages(app: FastifyInstance): Promise<void> {
  const { db } = app.deps;

  app.get('/contacts', signedIn, async (request, reply) => {
    // E-mails are stored lower-cased (contacts/queries.ts), so the search is too.
    const q = queryField(request.query, 'q', 320).trim().toLowerCase();
    const after = queryField(request.query, 'after', 320);
    const rows = await contactPage(db, user(request).teamId, q, after);
    const more = rows.length > CONTACTS_PER_PAGE;
    const contacts = rows.slice(0, CONTACTS_PER_PAGE);
    return render(request, reply, 'contacts', {
      q,
      contacts,
      paged: !!after,
      next: more ? contacts[contacts.length - 1].email : null,
    });
  });

  app.get<{ Params: { id: string } }>('/contacts/:id', signedIn, async (request, reply) => {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const contact = await findContact(db, user(request).teamId, request.params.id);
    if (!contact) throw pageNotFound();
    const row = contact as unknown as Record<string, unknown>;
    const show = (v: unknown) => (v instanceof Date ? when(v) : String(v));
    const fields = CONTACT_FIELDS.filter((f) => row[f.name] !== null && row[f.name] !== undefined).map((f) => ({
      name: f.name,
      value: show(row[f.name]),
    }));
    const activity = ACTIVITY.map(([label, count, last]) => ({ label, count: row[count], last: row[last] }));
    const messages = await contactMessages(db, user(request).teamId, contact.id);
    return render(request, reply, 'contact', { contact, fields, activity, messages });
  });

  // The contact's timeline: the API's pages (contacts/timeline.ts), newest
  // first or oldest first, each item in words.
  app.get<{ Params: { id: string } }>('/contacts/:id/timeline', signedIn, async (request, reply) => {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const teamId = user(request).teamId;
    const contact = await findContact(db, teamId, request.params.id);
    if (!contact) throw pageNotFound();
    const order: TimelineOrder = queryField(request.query, 'order', 4) === 'asc' ? 'asc' : 'desc';
    const after = queryField(request.query, 'after', 200);
    let page;
    try {
      page = await contactTimeline(db, teamId, contact, { perPage: TIMELINE_PER_PAGE, order, cursor: after || undefined });
    } catch (err) {
      if (err instanceof AppError) throw new PageError(400, 'This page link is broken: start again from the first page of the timeline.');
      throw err;
    }
    return render(request, reply, 'contact-timeline', {
      contact,
      order,
      items: page.items.map(describeItem),
      paged: !!after,
      next: page.nextCursor,
    });
  });
}
