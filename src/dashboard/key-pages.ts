// Developer Tools → API Keys: create (the key is shown once, on the answer to
// the create form, never stored in clear), list, revoke with a confirmation step
// that works without JavaScript.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { createApiKey, listApiKeys, revokeApiKey } from '../teams/queries.ts';
import { field, queryField, signedIn, signedInPost, user, UUID_RE } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { render } from './views.ts';

type IdParams = { Params: { id: string } };
const BASE = '/developer/api-keys';

export async function keyPages(app: FastifyInstance): Promise<void> {
  const { db } = app.deps;

  async function findKey(request: FastifyRequest<IdParams>) {
    const id = request.params.id;
    if (!UUID_RE.test(id)) throw pageNotFound();
    // A team has a handful of keys: its list is the cheapest scoped lookup.
    const key = (await listApiKeys(db, user(request).teamId)).find((k) => k.id === id.toLowerCase());
    if (!key) throw pageNotFound();
    return key;
  }

  const listPage = async (request: FastifyRequest, extra: Record<string, unknown> = {}) => ({
    keys: await listApiKeys(db, user(request).teamId),
    done: queryField(request.query, 'done', 20),
    ...extra,
  });

  app.get(BASE, signedIn, async (request, reply) => render(request, reply, 'api-keys', await listPage(request)));

  app.post(BASE, signedInPost, async (request, reply) => {
    const name = field(request.body, 'name', 200).trim();
    if (!name) {
      return render(request, reply, 'api-keys', await listPage(request, { error: 'Give the key a name, 1 to 200 characters.' }), 422);
    }
    const { key, info } = await createApiKey(db, user(request).teamId, name);
    // Rendered straight from the POST (no redirect), so the key is in exactly one
    // response, which no-store keeps out of every cache.
    return render(request, reply, 'api-keys', await listPage(request, { created: { key, name: info.name } }), 201);
  });

  app.get<IdParams>(`${BASE}/:id/revoke`, signedIn, async (request, reply) => {
    const key = await findKey(request);
    return render(request, reply, 'api-key-revoke', { key });
  });

  app.post<IdParams>(`${BASE}/:id/revoke`, signedInPost, async (request, reply) => {
    const key = await findKey(request);
    if (!key.revoked_at) {
      await revokeApiKey(db, key.id, user(request).teamId);
      // Refused at once in this process; other processes within the cache TTL.
      app.apiKeys.invalidate(key.id);
    }
    return reply.redirect(`${BASE}?done=revoked`, 303);
  });
}
