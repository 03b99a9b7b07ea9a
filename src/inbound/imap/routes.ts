// The IMAP mailbox of a mail account, as a sub-resource:
// PUT /email/mail-accounts/{id}/imap sets or replaces it (the password is
// required each time: it is never shown, so a form cannot round-trip it),
// GET shows it with the poll's state, DELETE stops polling.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { Ok, rejectInvalidId, UUID_PATTERN, withErrors } from '../../http/schemas.ts';
import { notFound } from '../../lib/errors.ts';
import { parseAllowList } from '../../lib/net-guard.ts';
import { deleteImapSettings, findImapSettings, ImapSettings, ImapSettingsBody, saveImapSettings, toImapSettings } from './settings.ts';

const IdParams = Type.Object({ id: Type.String({ format: 'uuid', pattern: UUID_PATTERN }) });
const ImapResponse = Type.Object({ ok: Type.Literal(true), imap: ImapSettings });

export const mailAccountImapRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db, config } = app.deps;
  const guard = { allow: parseAllowList(config.allowedPrivateTargets), resolve: app.deps.resolveHost };
  const exists = async (teamId: string, id: string) =>
    (await db.selectFrom('mail_accounts').select('id').where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst()) !== undefined;

  app.put(
    '/:id/imap',
    {
      attachValidation: true,
      schema: {
        tags: ['mail accounts'],
        summary: "Set a mail account's IMAP mailbox",
        description:
          'The mailbox where bounces, complaints and replies to this account arrive when they come back to its own address. It is ' +
          `polled every ${config.inboundProviders.imapPollIntervalS} s: unseen messages are read (each up to a size cap), classified like ` +
          'mail to the inbound listener, applied to the message log, and marked seen. The host follows the rules of SMTP hosts ' +
          '(public, or listed in ALLOWED_PRIVATE_TARGETS; a public host only on ports 143 and 993). The password is stored ' +
          'encrypted and never returned.',
        params: IdParams,
        body: ImapSettingsBody,
        response: withErrors({ 200: ImapResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      if (!config.appSecret) throw new Error('APP_SECRET is not configured');
      const row = await saveImapSettings(db, config.appSecret, request.auth!.teamId, request.params.id, request.body, guard);
      return { ok: true as const, imap: toImapSettings(row) };
    },
  );

  app.get(
    '/:id/imap',
    {
      attachValidation: true,
      schema: {
        tags: ['mail accounts'],
        summary: "Get a mail account's IMAP mailbox",
        description: 'The mailbox settings (without the password) and the state of its polling; 404 when none is set.',
        params: IdParams,
        response: withErrors({ 200: ImapResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      const row = await findImapSettings(db, request.auth!.teamId, request.params.id);
      if (!row) throw notFound((await exists(request.auth!.teamId, request.params.id)) ? 'IMAP mailbox' : 'mail account');
      return { ok: true as const, imap: toImapSettings(row) };
    },
  );

  app.delete(
    '/:id/imap',
    {
      attachValidation: true,
      schema: {
        tags: ['mail accounts'],
        summary: "Remove a mail account's IMAP mailbox",
        description: 'Polling stops; the mailbox itself is not touched.',
        params: IdParams,
        response: withErrors({ 200: Ok }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      if (!(await deleteImapSettings(db, request.auth!.teamId, request.params.id))) {
        throw notFound((await exists(request.auth!.teamId, request.params.id)) ? 'IMAP mailbox' : 'mail account');
      }
      return { ok: true as const };
    },
  );
};
