import { retryOnConflict } from '../lib/db-retry.ts';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { pageMeta, withErrors } from '../http/schemas.ts';
import { findContactByEmail, listUnsubscribed, normaliseContacts, unsubscribeContacts, upsertContacts } from './queries.ts';
import {
  BulkUnsubscribeBody,
  BulkUnsubscribeResponse,
  BulkUpsertBody,
  BulkUpsertResponse,
  ContactInput,
  UnsubscribeBody,
  UnsubscribeResponse,
  UnsubscribesQuery,
  UnsubscribesResponse,
  UpsertResponse,
  type ContactInputT,
} from './schemas.ts';
import { contactView } from './view.ts';
import { contactManageRoutes } from './manage-routes.ts';
import { normalizeEmail } from '../lib/text.ts';

const tags = ['contacts'];

export const contactsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const db = app.deps.db;
  const maxTags = app.deps.config.contactMaxTags;

  app.post(
    '/upsert',
    {
      schema: {
        tags,
        summary: 'Create or update one contact',
        description:
          'Absent fields keep their stored value, null clears one, tags are added. Never resubscribes an unsubscribed or bounced contact. ' +
          'A contact holds at most 100 tags (configurable): an upsert that would pass the cap is refused (422) and changes nothing.',
        body: ContactInput,
        response: withErrors({ 200: UpsertResponse }),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const field = () => 'tags';
      const { patches, firstIndex } = normaliseContacts([request.body as ContactInputT], [], { maxTags, field });
      const patch = patches[0]!;
      return retryOnConflict(() => db.transaction().execute(async (tx) => {
        const result = await upsertContacts(tx, teamId, patches, { maxTags, firstIndex, field });
        const contact = await findContactByEmail(tx, teamId, patch.email);
        return { ok: true as const, contact: contactView(contact!) as never, created: result.created.length === 1 };
      }));
    },
  );

  app.post(
    '/bulk-upsert',
    {
      schema: {
        tags,
        summary: 'Create or update up to 1,000 contacts at once',
        description:
          'Validated whole: one invalid contact rejects the request (422 listing every problem) and nothing is written. Duplicate addresses are merged, later fields winning. ' +
          'A contact holds at most 100 tags (configurable): a contact the request would take past the cap is a 422 naming its first index, and nothing is written.',
        body: BulkUpsertBody,
        response: withErrors({ 200: BulkUpsertResponse }),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const { patches, firstIndex } = normaliseContacts(request.body.contacts as ContactInputT[], request.body.tags ?? [], { maxTags });
      const result = await retryOnConflict(() => db.transaction().execute((tx) => upsertContacts(tx, teamId, patches, { maxTags, firstIndex })));
      return {
        ok: true as const,
        summary: {
          received: request.body.contacts.length,
          created: result.created.length,
          updated: result.updated.length,
          unchanged: result.unchanged,
        },
      };
    },
  );

  app.post(
    '/unsubscribe',
    {
      schema: {
        tags,
        summary: 'Unsubscribe one address',
        description: 'An unknown address is recorded as an unsubscribed contact, so it is never mailed.',
        body: UnsubscribeBody,
        response: withErrors({ 200: UnsubscribeResponse }),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const email = normalizeEmail(request.body.email);
      return retryOnConflict(() => db.transaction().execute(async (tx) => {
        await unsubscribeContacts(tx, teamId, [email], request.body.reason ?? null, 'api');
        const contact = await findContactByEmail(tx, teamId, email);
        return { ok: true as const, contact: contactView(contact!) as never };
      }));
    },
  );

  app.post(
    '/bulk-unsubscribe',
    {
      schema: {
        tags,
        summary: 'Unsubscribe up to 1,000 addresses at once',
        body: BulkUnsubscribeBody,
        response: withErrors({ 200: BulkUnsubscribeResponse }),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const emails = request.body.emails.map(normalizeEmail);
      const r = await retryOnConflict(() => db.transaction().execute((tx) => unsubscribeContacts(tx, teamId, emails, request.body.reason ?? null, 'api')));
      return { ok: true as const, summary: { received: request.body.emails.length, unsubscribed: r.unsubscribed, unchanged: r.unchanged } };
    },
  );

  app.get(
    '/unsubscribes',
    {
      schema: {
        tags,
        summary: "List the team's unsubscribed contacts",
        querystring: UnsubscribesQuery,
        response: withErrors({ 200: UnsubscribesResponse }),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const page = request.query.page ?? 1;
      const perPage = request.query.per_page ?? 50;
      const search = request.query.search?.trim().toLowerCase();
      const { rows, total } = await listUnsubscribed(db, teamId, { page, perPage, search });
      return { ok: true as const, contacts: rows.map(contactView) as never[], meta: pageMeta(page, perPage, total) };
    },
  );

  // List, get, PATCH and erase (one plugin of their own; same prefix).
  await app.register(contactManageRoutes);
};
