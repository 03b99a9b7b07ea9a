// Mail accounts API (docs/api.md, "Mail accounts"): create, list, get, update, delete. No response carries
// the password or its ciphertext.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { notFound } from '../lib/errors.ts';
import { deleteMailAccount, updateMailAccount, UpdateMailAccountBody } from './accounts-manage.ts';
import { parseAllowList } from '../lib/net-guard.ts';
import { Ok, PageMeta, pageMeta, pageQuery, rejectInvalidId, UUID_PATTERN, withErrors } from '../http/schemas.ts';
import { createMailAccount, findMailAccount, listMailAccounts, MailAccount, MailAccountBody, mailAccountViews } from './accounts.ts';

// ajv's `uuid` format also takes a `urn:uuid:` prefix, which PostgreSQL refuses.
const IdParams = Type.Object({
  id: Type.String({ format: 'uuid', pattern: UUID_PATTERN }),
});
const ListQuery = pageQuery(20, {});
const MailAccountResponse = Type.Object({ ok: Type.Literal(true), mail_account: MailAccount });
const MailAccountListResponse = Type.Object({ ok: Type.Literal(true), mail_accounts: Type.Array(MailAccount), meta: PageMeta });


function appSecret(secret: string | undefined): string {
  // main.ts always supplies one (APP_SECRET, or the embedded database's own).
  if (!secret) throw new Error('APP_SECRET is not configured');
  return secret;
}

export const mailAccountsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const guard = { allow: parseAllowList(app.deps.config.allowedPrivateTargets), resolve: app.deps.resolveHost };
  app.post(
    '',
    {
      schema: {
        tags: ['mail accounts'],
        summary: 'Create a mail account',
        description:
          'Saves SMTP credentials for the team; the password is encrypted at rest and never returned. With `verify: true` the ' +
          'SMTP login is checked first (up to ~10 s per connection phase); a failed login is 422 with a `verify` detail and nothing is saved. ' +
          'The host must be public (or listed in the operator\'s ALLOWED_PRIVATE_TARGETS) and a public host must use port 25, 465, 587 ' +
          'or 2525; a refused host is 422 naming `host` (or `port`). A failed verify says only what failed (could not connect, timed out, ' +
          'TLS handshake failed, login refused, ...), never what the server answered. `imap` (host, port, security, user, password, folder) ' +
          'sets the mailbox polled for bounces, complaints and replies, with the same host rules (public hosts on ports 143 and 993); ' +
          'it is saved with the account in one transaction, its password encrypted and never returned.',
        body: MailAccountBody,
        response: withErrors({ 201: MailAccountResponse }),
      },
    },
    async (request, reply) => {
      const row = await createMailAccount(app.deps.db, appSecret(app.deps.config.appSecret), request.auth!.teamId, request.body, guard, app.deps.config.inbound);
      const [view] = await mailAccountViews(app.deps.db, request.auth!.teamId, [row]);
      return reply.code(201).send({ ok: true as const, mail_account: view! });
    },
  );

  app.get(
    '',
    {
      schema: {
        tags: ['mail accounts'],
        summary: 'List mail accounts',
        description: "The team's mail accounts, newest first, without secrets.",
        querystring: ListQuery,
        response: withErrors({ 200: MailAccountListResponse }),
      },
    },
    async (request) => {
      const page = request.query.page ?? 1;
      const perPage = request.query.per_page ?? 20;
      const { rows, total } = await listMailAccounts(app.deps.db, request.auth!.teamId, { page, perPage });
      return { ok: true as const, mail_accounts: await mailAccountViews(app.deps.db, request.auth!.teamId, rows), meta: pageMeta(page, perPage, total) };
    },
  );

  app.get(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['mail accounts'],
        summary: 'Get a mail account',
        description: 'One mail account of the team, without secrets.',
        params: IdParams,
        response: withErrors({ 200: MailAccountResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      const row = await findMailAccount(app.deps.db, request.auth!.teamId, request.params.id);
      if (!row) throw notFound('mail account');
      const [view] = await mailAccountViews(app.deps.db, request.auth!.teamId, [row]);
      return { ok: true as const, mail_account: view! };
    },
  );

  app.patch(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['mail accounts'],
        summary: 'Update a mail account',
        description:
          'Changes any field of create (at least one), and `status` (`active`, `disabled`). The password is write-only: a new one is ' +
          'encrypted again, and `username: null` removes the login with its password. A new host or port must pass the rules of ' +
          "create (public, or listed in the operator's ALLOWED_PRIVATE_TARGETS; public hosts on port 25, 465, 587 or 2525). With " +
          '`verify: true` the login is checked with the updated settings first; a failed check is 422 and nothing changes. The next ' +
          'message through the account opens a new connection with the new settings. `imap` replaces the IMAP mailbox (leave out its ' +
          '`password` to keep the stored one) and `imap: null` removes it; it is written in the same transaction as the account.',
        params: IdParams,
        body: UpdateMailAccountBody,
        response: withErrors({ 200: MailAccountResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      const row = await updateMailAccount(app.deps.db, appSecret(app.deps.config.appSecret), request.auth!.teamId, request.params.id, request.body, guard, app.deps.config.inbound);
      const [view] = await mailAccountViews(app.deps.db, request.auth!.teamId, [row]);
      return { ok: true as const, mail_account: view! };
    },
  );

  app.delete(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['mail accounts'],
        summary: 'Delete a mail account',
        description:
          'While a campaign uses the account, 409 naming the campaigns (in `details`): remove the account from them or delete them ' +
          'first. Messages queued through it and not yet being sent become `cancelled`; one being sent finishes. The message log ' +
          'keeps its messages (with their `mail_account_id`); the account answers 404 from then on and its password is erased.',
        params: IdParams,
        response: withErrors({ 200: Ok }, [404, 409]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      await deleteMailAccount(app.deps.db, request.auth!.teamId, request.params.id);
      return { ok: true as const };
    },
  );
};
