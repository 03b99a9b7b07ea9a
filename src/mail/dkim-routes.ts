// DKIM keys of a mail account and its DNS check (API): generate, list,
// activate, delete, check DNS. Registered under /email/mail-accounts next to
// the account routes. No answer carries a private key.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { notFound } from '../lib/errors.ts';
import { Ok, rejectInvalidId, UUID_PATTERN, withErrors } from '../http/schemas.ts';
import { findMailAccount } from './accounts.ts';
import {
  ActivateBody, activateDkimKey, createDkimKey, deleteDkimKey, DkimKey, DkimKeyBody, domainOf, listDkimKeys, toDkimKey,
} from './dkim.ts';
import { checkDomainDns, systemTxtResolver } from './dns-check.ts';

const Uuid = Type.String({ format: 'uuid', pattern: UUID_PATTERN });
const AccountParams = Type.Object({ id: Uuid });
const KeyParams = Type.Object({ id: Uuid, key_id: Uuid });
const KeyResponse = Type.Object({ ok: Type.Literal(true), dkim_key: DkimKey });
const KeyListResponse = Type.Object({ ok: Type.Literal(true), dkim_keys: Type.Array(DkimKey) });

const Finding = {
  name: Type.String({ description: 'The DNS name looked up.' }),
  records: Type.Array(Type.String(), { description: 'The relevant TXT records found there (at most 10).' }),
  message: Type.String(),
};
const DnsReport = Type.Object(
  {
    domain: Type.String(),
    checked_at: Type.String({ format: 'date-time' }),
    spf: Type.Object({ status: Type.Enum(['found', 'missing', 'invalid', 'error']), ...Finding }),
    dkim: Type.Array(
      Type.Object({
        key_id: Type.String(),
        selector: Type.String(),
        algorithm: Type.String(),
        key_status: Type.String({ description: 'The key\'s own state: pending, active or retired.' }),
        status: Type.Enum(['found', 'missing', 'mismatch', 'error'], { description: '`mismatch`: a DKIM record is published there, with another key.' }),
        ...Finding,
      }),
    ),
    dmarc: Type.Object({
      status: Type.Enum(['found', 'missing', 'invalid', 'error']),
      policy: Type.Union([Type.String(), Type.Null()], { description: 'The record\'s `p=`: none, quarantine or reject.' }),
      ...Finding,
    }),
  },
  { title: 'DnsReport' },
);
const DnsResponse = Type.Object({ ok: Type.Literal(true), dns: DnsReport });

export const dkimRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db } = app.deps;
  const resolveTxt = app.deps.resolveTxt ?? systemTxtResolver;
  const appSecret = () => {
    if (!app.deps.config.appSecret) throw new Error('APP_SECRET is not configured');
    return app.deps.config.appSecret;
  };
  const tags = ['mail accounts'];

  app.get(
    '/:id/dkim',
    {
      attachValidation: true,
      schema: {
        tags, summary: 'List DKIM keys',
        description: 'The mail account\'s DKIM keys, newest first, each with the DNS TXT record that publishes it. Never a private key.',
        params: AccountParams,
        response: withErrors({ 200: KeyListResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      const rows = await listDkimKeys(db, request.auth!.teamId, request.params.id);
      return { ok: true as const, dkim_keys: rows.map(toDkimKey) };
    },
  );

  app.post(
    '/:id/dkim',
    {
      attachValidation: true,
      schema: {
        tags, summary: 'Generate a DKIM key',
        description:
          'Generates a key pair (RSA 2048 or Ed25519) for the account\'s From domain; the private key is encrypted at rest and never returned. ' +
          'The key starts `pending`: publish `dns_record`, then activate it. While it waits, the account\'s active key of the same algorithm ' +
          'keeps signing (rotation without a gap). A selector already used by the team for the domain is 409; at most 10 keys per account.',
        params: AccountParams,
        body: DkimKeyBody,
        response: withErrors({ 201: KeyResponse }, [404, 409]),
      },
    },
    async (request, reply) => {
      rejectInvalidId(request, 'mail account');
      const row = await createDkimKey(db, appSecret(), request.auth!.teamId, request.params.id, request.body);
      return reply.code(201).send({ ok: true as const, dkim_key: toDkimKey(row) });
    },
  );

  app.post(
    '/:id/dkim/:key_id/activate',
    {
      attachValidation: true,
      schema: {
        tags, summary: 'Activate a DKIM key',
        description:
          'The key signs every message of the account from now on; the active key of its algorithm, if any, becomes `retired` in the same ' +
          'step. The key\'s TXT record is looked up first: when it is missing or publishes another key the answer is 409 and nothing changes ' +
          '(`force: true` skips the lookup). Activating the active key is a no-op. An account with an active RSA and an active Ed25519 key ' +
          'signs each message with both.',
        params: KeyParams,
        body: ActivateBody,
        response: withErrors({ 200: KeyResponse }, [404, 409]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'DKIM key');
      const row = await activateDkimKey(db, request.auth!.teamId, request.params.id, request.params.key_id, {
        force: request.body?.force ?? false, resolveTxt,
      });
      return { ok: true as const, dkim_key: toDkimKey(row) };
    },
  );

  app.delete(
    '/:id/dkim/:key_id',
    {
      attachValidation: true,
      schema: {
        tags, summary: 'Delete a DKIM key',
        description: 'Deletes the key. Deleting the active key stops signing with its algorithm; remove its DNS record only after that.',
        params: KeyParams,
        response: withErrors({ 200: Ok }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'DKIM key');
      await deleteDkimKey(db, request.auth!.teamId, request.params.id, request.params.key_id);
      return { ok: true as const };
    },
  );

  app.get(
    '/:id/dns-check',
    {
      attachValidation: true,
      schema: {
        tags, summary: 'Check the DNS records of the account\'s domain',
        description:
          'Looks up, for the From domain: SPF (a `v=spf1` TXT record on the domain), each DKIM key\'s record (TXT at ' +
          '`<selector>._domainkey.<domain>`, its key compared with ours: found, missing or mismatch) and DMARC (TXT at `_dmarc.<domain>`, ' +
          'else at the organisational domain). A lookup that fails or times out is `error`. Nothing is stored.',
        params: AccountParams,
        response: withErrors({ 200: DnsResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'mail account');
      const account = await findMailAccount(db, request.auth!.teamId, request.params.id);
      if (!account) throw notFound('mail account');
      const keys = await listDkimKeys(db, request.auth!.teamId, account.id);
      return { ok: true as const, dns: await checkDomainDns(domainOf(account.from_email), keys, resolveTxt) };
    },
  );
};
