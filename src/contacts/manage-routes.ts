// The contact management routes under /email/contacts: list, get (by id or
// address), PATCH, DELETE (erase) and erase by address.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { dateTimeValue, isEmail, pageMeta, rejectInvalidId, withErrors } from '../http/schemas.ts';
import { notFound, validationFailed } from '../lib/errors.ts';
import { normalizeEmail } from '../lib/text.ts';
import { eraseAddress } from './erase.ts';
import { findContactById, listContacts, patchContact, patchProblems } from './manage.ts';
import { findContactByEmail } from './queries.ts';
import {
  ContactEmailQuery,
  ContactIdParams,
  ContactListQuery,
  ContactListResponse,
  ContactPatchBody,
  ContactResponse,
  EraseBody,
  EraseResponse,
  PatchResponse,
  TimelineQuery,
  TimelineResponse,
  type ContactPatchBodyT,
} from './schemas.ts';
import { contactTimeline } from './timeline.ts';
import { contactView } from './view.ts';

const tags = ['contacts'];

// An erasure is one transaction whose time grows with the subject's rows
// (about 35 s for a contact with 100,000 messages, events, hits and deliveries
// on the shared 2-core test machine): the socket's idle timeout
// (HTTP_CONNECTION_TIMEOUT_MS, 30 s by default) must not cut the answer off
// while it commits. Node restores the keep-alive timeout after the response.
const ERASE_SOCKET_TIMEOUT_MS = 10 * 60_000;
// (An injected test request has no real socket.)
const extendSocketTimeout = (raw: { socket?: { setTimeout?: (ms: number) => unknown } }) => raw.socket?.setTimeout?.(ERASE_SOCKET_TIMEOUT_MS);

const ERASE_DESCRIPTION =
  'Erases the address everywhere in the team, in one transaction: the contact is deleted; its messages are kept for the counts but ' +
  'anonymised (address, name, subject, variables and SMTP answers cleared; a message not yet sent is cancelled); tracking hits, ' +
  'events about it and their webhook deliveries are deleted; leads and sales stay, unlinked. The address stays suppressed for all ' +
  'mail through a keyed hash (reason `erased`): it is not stored in clear anywhere. Answers how many rows of each kind were removed or scrubbed.';

export const contactManageRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db, config } = app.deps;
  const secret = () => {
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    return config.appSecret;
  };

  app.get(
    '',
    {
      schema: {
        tags,
        summary: "List the team's contacts",
        description:
          'Newest first. Filters: `status`, `tag` (exact), `search` (the address starts with it, case-insensitive), ' +
          '`created_after` (inclusive) and `created_before` (exclusive).',
        querystring: ContactListQuery,
        response: withErrors({ 200: ContactListResponse }),
      },
    },
    async (request) => {
      const q = request.query;
      const page = q.page ?? 1;
      const perPage = q.per_page ?? 20;
      const createdAfter = q.created_after === undefined ? undefined : dateTimeValue(q.created_after);
      const createdBefore = q.created_before === undefined ? undefined : dateTimeValue(q.created_before);
      if (createdAfter && createdBefore && createdAfter > createdBefore) {
        throw validationFailed([{ field: 'created_before', message: 'must not be earlier than created_after' }]);
      }
      const { rows, total } = await listContacts(db, request.auth!.teamId, {
        page, perPage, status: q.status, tag: q.tag, search: q.search?.trim() || undefined, createdAfter, createdBefore,
      });
      return { ok: true as const, contacts: rows.map(contactView) as never[], meta: pageMeta(page, perPage, total) };
    },
  );

  app.get(
    '/by-email',
    {
      schema: {
        tags,
        summary: 'Get a contact by e-mail address',
        description: '`?email=`: the address is matched trimmed and lower-cased (URL-encode it: `+` is `%2B`). No contact with it: 404.',
        querystring: ContactEmailQuery,
        response: withErrors({ 200: ContactResponse }, [404]),
      },
    },
    async (request) => {
      const email = request.query.email;
      // An address that cannot be stored names no contact.
      const found = isEmail(email) ? await findContactByEmail(db, request.auth!.teamId, normalizeEmail(email)) : undefined;
      if (!found) throw notFound('contact');
      return { ok: true as const, contact: contactView(found) as never };
    },
  );

  app.get(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags,
        summary: 'Get a contact',
        params: ContactIdParams,
        response: withErrors({ 200: ContactResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'contact');
      const found = await findContactById(db, request.auth!.teamId, request.params.id);
      if (!found) throw notFound('contact');
      return { ok: true as const, contact: contactView(found) as never };
    },
  );

  app.get(
    '/:id/timeline',
    {
      attachValidation: true,
      schema: {
        tags,
        summary: "A contact's timeline",
        description:
          'Everything that happened to the contact, newest first (`order=asc`: oldest first): saves, unsubscribes, ingested events ' +
          '(leads, sales, custom), each campaign decision with its reason, each message (queued or suppressed, sent, deferred, ' +
          'bounced, delivered, complained, replied, failed, cancelled), every open and click with its bot verdict and signals, ' +
          'its suppression and the webhook deliveries of its events. Items are `{at, type, detail}`; the types and their details ' +
          'are listed in docs/decisions.md ("Contact timeline"). Pages by cursor: pass `meta.next_cursor` back as `cursor` ' +
          '(null on the last page); `per_page` 1..100, default 20.',
        params: ContactIdParams,
        querystring: TimelineQuery,
        response: withErrors({ 200: TimelineResponse }, [404]),
      },
    },
    async (request) => {
      // A malformed id is a 404; any other validation error (per_page, order, cursor) stands as a 422.
      rejectInvalidId(request, 'contact');
      const q = request.query;
      const teamId = request.auth!.teamId;
      const contact = await findContactById(db, teamId, request.params.id);
      if (!contact) throw notFound('contact');
      const perPage = q.per_page ?? 20;
      const order = q.order ?? 'desc';
      const page = await contactTimeline(db, teamId, contact, { perPage, order, cursor: q.cursor });
      return {
        ok: true as const,
        timeline: page.items,
        meta: { current_page: String(page.page), per_page: perPage, order, next_cursor: page.nextCursor },
      };
    },
  );

  app.patch(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags,
        summary: 'Change a contact',
        description:
          'Fields as the upsert takes them (absent keeps, null clears; custom fields at the top level or under `custom_fields`). ' +
          '`tags` replaces every tag; `add_tags` and `remove_tags` edit them (not together with `tags`). The address cannot change ' +
          '(it is the contact\'s identity): upsert the new one and erase the old. A contact holds at most 100 tags (configurable): ' +
          'a PATCH that would add past the cap is 422 and changes nothing. A change emits `contact.saved` (webhooks, campaigns) ' +
          'as a save by upsert does; `changed: false` when nothing changed (no event).',
        params: ContactIdParams,
        body: ContactPatchBody,
        response: withErrors({ 200: PatchResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'contact');
      const body = request.body as ContactPatchBodyT;
      const problems = patchProblems(body);
      if (problems.length > 0) throw validationFailed(problems);
      const teamId = request.auth!.teamId;
      const result = await db.transaction().execute((tx) => patchContact(tx, teamId, request.params.id, body, config.contactMaxTags));
      if (!result) throw notFound('contact');
      return { ok: true as const, contact: contactView(result.contact) as never, changed: result.changed };
    },
  );

  app.delete(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags,
        summary: 'Erase a contact',
        description: ERASE_DESCRIPTION,
        params: ContactIdParams,
        response: withErrors({ 200: EraseResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'contact');
      const teamId = request.auth!.teamId;
      const key = secret();
      extendSocketTimeout(request.raw);
      const erased = await db.transaction().execute(async (tx) => {
        const found = await findContactById(tx, teamId, request.params.id);
        return found ? eraseAddress(tx, teamId, found.email, key) : undefined;
      });
      if (!erased) throw notFound('contact');
      return { ok: true as const, erased };
    },
  );

  app.post(
    '/erase',
    {
      schema: {
        tags,
        summary: 'Erase an address',
        description: `${ERASE_DESCRIPTION} Works for any address, a contact's or not (a transactional recipient need not be a contact).`,
        body: EraseBody,
        response: withErrors({ 200: EraseResponse }),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const email = normalizeEmail(request.body.email);
      const key = secret();
      extendSocketTimeout(request.raw);
      const erased = await db.transaction().execute((tx) => eraseAddress(tx, teamId, email, key));
      return { ok: true as const, erased };
    },
  );
};
