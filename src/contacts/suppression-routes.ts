// The suppression list API (/email/suppressions): the addresses no message of
// the team goes to, and why. List with filters and pages, add one or up to
// 1,000 (validated whole, one transaction, one set-based write), remove what a
// team may remove. Every send path reads the same table (contacts/suppressions.ts).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { dateTimeValue, pageMeta, rejectInvalidId, withErrors } from '../http/schemas.ts';
import { notFound, validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { normalizeEmail } from '../lib/text.ts';
import {
  AddSuppressionsBody, AddSuppressionsResponse, EmailParams, RemoveSuppressionResponse, SuppressionsQuery, SuppressionsResponse,
} from './suppression-schemas.ts';
import { addSuppressions, listSuppressions, removeSuppression, suppressionView, type ClientReason } from './suppressions.ts';

const tags = ['suppressions'];

export const suppressionsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db, config } = app.deps;
  const secret = () => {
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    return config.appSecret;
  };

  app.get('', {
    schema: {
      tags, summary: "List the team's suppressed addresses",
      description:
        'Newest first. Filters: `reason`, `search` (e-mail prefix), `created_from` (inclusive) and `created_to` (exclusive). ' +
        'An erased address is listed with `email: null` and reason `erased`: only its keyed hash is kept, so no search finds it.',
      querystring: SuppressionsQuery,
      response: withErrors({ 200: SuppressionsResponse }),
    },
  }, async (request) => {
    const q = request.query;
    const page = q.page ?? 1;
    const perPage = q.per_page ?? 20;
    const createdFrom = q.created_from === undefined ? undefined : dateTimeValue(q.created_from);
    const createdTo = q.created_to === undefined ? undefined : dateTimeValue(q.created_to);
    if (createdFrom && createdTo && createdTo <= createdFrom) {
      throw validationFailed([{ field: 'created_to', message: 'must be after created_from' }]);
    }
    const search = q.search?.trim().toLowerCase() || undefined;
    const { rows, total } = await listSuppressions(db, request.auth!.teamId, { page, perPage, reason: q.reason, search, createdFrom, createdTo });
    return { ok: true as const, suppressions: rows.map(suppressionView), meta: pageMeta(page, perPage, total) };
  });

  app.post('', {
    schema: {
      tags, summary: 'Suppress one address or up to 1,000',
      description:
        'Either `email` (one address) or `suppressions` (1 to 1,000 entries `{email, reason?}`); `reason` defaults to `manual`. ' +
        'Validated whole: one bad entry is a 422 listing every problem, and nothing is written. An address keeps one entry: the ' +
        'strongest reason is in force, and every reason given is remembered. A contact of the team that is `active` becomes ' +
        '`unsubscribed`, `bounced` or `complained` with that reason; `manual` leaves its status as it is (the list alone stops its mail). ' +
        'No webhook event is emitted.',
      body: AddSuppressionsBody,
      response: withErrors({ 200: AddSuppressionsResponse }, [413]),
    },
  }, async (request) => {
    const body = request.body;
    const fallback: ClientReason = body.reason ?? 'manual';
    const problems: ErrorDetail[] = [];
    if (body.email !== undefined && body.suppressions !== undefined) {
      problems.push({ field: 'suppressions', message: 'give either email or suppressions, not both' });
    }
    if (body.email === undefined && body.suppressions === undefined) {
      problems.push({ field: 'email', message: 'is required (or suppressions, for several addresses)' });
    }
    if (problems.length > 0) throw validationFailed(problems);
    const items = (body.suppressions ?? [{ email: body.email!, reason: undefined }]).map((s) => ({
      email: normalizeEmail(s.email),
      reason: s.reason ?? fallback,
    }));
    const r = await db.transaction().execute((tx) => addSuppressions(tx, request.auth!.teamId, items));
    return {
      ok: true as const,
      summary: { received: items.length, added: r.added, updated: r.updated, unchanged: r.unchanged, contacts_changed: r.contacts_changed },
      suppressions: r.entries.map(suppressionView),
    };
  });

  app.delete('/:email', {
    attachValidation: true,
    schema: {
      tags, summary: "Remove an address's entry",
      description:
        'Removes what the team may remove: `manual`, `bounced_hard` and `soft_bounce` entries. An entry the recipient caused ' +
        '(`unsubscribed`, `complained`, `erased`) is 409 CONFLICT and stays; an entry that also remembers an unsubscribe falls back ' +
        'to it (answered as `suppression`). A contact `bounced` by the removed hard bounce becomes `active` again (or `unsubscribed`). ' +
        'An erased address is found by its keyed hash. 404 when the team has no entry for the address.',
      params: EmailParams,
      response: withErrors({ 200: RemoveSuppressionResponse }, [404, 409]),
    },
  }, async (request) => {
    rejectInvalidId(request, 'suppression');
    const email = normalizeEmail(request.params.email);
    const result = await db.transaction().execute((tx) => removeSuppression(tx, request.auth!.teamId, email, secret()));
    if (!result) throw notFound('suppression');
    return { ok: true as const, removed: result.removed, suppression: result.remaining ? suppressionView(result.remaining) : null };
  });
};
