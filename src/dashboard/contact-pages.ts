// Contacts: e-mail prefix search with keyset paging, and one contact's fields,
// tags, status, activity counts and latest messages; "Erase this contact" (a
// GDPR request) with a confirm step that names what goes, through eraseAddress
// (contacts/erase.ts), as DELETE /email/contacts/{id}.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { sql } from 'kysely';
import { eraseAddress } from '../contacts/erase.ts';
import { findContactById } from '../contacts/manage.ts';
import type { Db } from '../db/pool.ts';
import { CONTACT_FIELDS } from '../contacts/fields.ts';
import { contactTimeline, type TimelineOrder } from '../contacts/timeline.ts';
import { AppError } from '../lib/errors.ts';
import { describeItem } from './contact-timeline-view.ts';
import { queryField, signedIn, signedInPost, user, UUID_RE } from './forms.ts';
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

/** Counted up to this many each on the erase confirm page (an index range each; "10,000+" past it). */
export const ERASE_COUNT_CAP = 10_000;

/** What erasing the contact removes, in words, with bounded counts of its rows. */
async function eraseSummary(db: Db, teamId: string, contact: { id: string; email: string }): Promise<string[]> {
  const { rows } = await sql<{ messages: number; events: number; suppressed: number }>`
    SELECT (SELECT count(*)::int FROM (SELECT 1 FROM email_send_log WHERE team_id = ${teamId} AND email = ${contact.email} LIMIT ${ERASE_COUNT_CAP + 1}) m) AS messages,
           (SELECT count(*)::int FROM (SELECT 1 FROM events WHERE team_id = ${teamId} AND contact_id = ${contact.id} LIMIT ${ERASE_COUNT_CAP + 1}) e) AS events,
           (SELECT count(*)::int FROM suppressions WHERE team_id = ${teamId} AND email = ${contact.email}) AS suppressed`.execute(db);
  const r = rows[0]!;
  const n = (k: number, one: string, many: string) => (k > ERASE_COUNT_CAP ? `${ERASE_COUNT_CAP.toLocaleString('en')}+ ${many}` : `${k} ${k === 1 ? one : many}`);
  return [
    `the contact ${contact.email}: its fields, tags and counters`,
    `${n(r.messages, 'message', 'messages')} to the address: kept for the counts, with the address, name, subject and content removed (one not sent yet is cancelled), and their open and click records`,
    `${n(r.events, 'event', 'events')} about the contact, with the copies webhooks received (their deliveries)`,
    'its campaign decisions; its leads and sales stay, unlinked, for the revenue counts',
    r.suppressed > 0
      ? 'its suppression list entry, replaced by a keyed hash of the address (reason erased)'
      : 'the address is added to the suppression list as a keyed hash only (reason erased)',
    'after this the address is never mailed again by this team, and no table holds it in clear',
  ];
}

export async function contactPages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;

  async function findOwn(request: FastifyRequest<{ Params: { id: string } }>) {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const contact = await findContactById(db, user(request).teamId, request.params.id.toLowerCase());
    if (!contact) throw pageNotFound();
    return contact;
  }

  app.get<{ Params: { id: string } }>('/contacts/:id/erase', signedIn, async (request, reply) => {
    const contact = await findOwn(request);
    return render(request, reply, 'confirm', {
      title: `Erase ${contact.email}?`,
      lead: 'For a request to be forgotten. Erasing removes, in one step that cannot be undone:',
      items: await eraseSummary(db, user(request).teamId, contact),
      action: `/contacts/${contact.id}/erase`,
      button: 'Erase this contact',
      back: `/contacts/${contact.id}`,
      back_label: contact.email,
    });
  });

  app.post<{ Params: { id: string } }>('/contacts/:id/erase', signedInPost, async (request, reply) => {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    // main.ts always supplies one (APP_SECRET, or the embedded database's own).
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    const secret = config.appSecret;
    const teamId = user(request).teamId;
    const id = request.params.id.toLowerCase();
    const erased = await db.transaction().execute(async (tx) => {
      const found = await findContactById(tx, teamId, id);
      return found ? eraseAddress(tx, teamId, found.email, secret) : undefined;
    });
    if (!erased) throw pageNotFound();
    return reply.redirect('/contacts?done=erased', 303);
  });

  app.get('/contacts', signedIn, async (request, reply) => {
    // E-mails are stored lower-cased (contacts/queries.ts), so the search is too.
    const q = queryField(request.query, 'q', 320).trim().toLowerCase();
    const after = queryField(request.query, 'after', 320);
    const rows = await contactPage(db, user(request).teamId, q, after);
    const more = rows.length > CONTACTS_PER_PAGE;
    const contacts = rows.slice(0, CONTACTS_PER_PAGE);
    return render(request, reply, 'contacts', {
      message: queryField(request.query, 'done', 20) === 'erased' ? 'Contact erased: no table holds the address in clear; it stays suppressed by its keyed hash.' : null,
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
