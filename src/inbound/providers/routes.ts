// Provider webhooks API: a team creates the inbound URL it gives its relay
// (SES through SNS, SendGrid, Postmark, Mailgun), lists and deletes them. The
// URL is a secret of the team and is shown to it; the signing key is never
// returned.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { Ok, PageMeta, pageMeta, pageQuery, rejectInvalidId, UUID_PATTERN, withErrors } from '../../http/schemas.ts';
import { notFound } from '../../lib/errors.ts';
import {
  createProviderWebhook,
  deleteProviderWebhook,
  findProviderWebhook,
  listProviderWebhooks,
  MAX_PROVIDER_WEBHOOKS_PER_TEAM,
  ProviderWebhook,
  ProviderWebhookBody,
  toProviderWebhook,
} from './settings.ts';

const IdParams = Type.Object({ id: Type.String({ format: 'uuid', pattern: UUID_PATTERN }) });
const One = Type.Object({ ok: Type.Literal(true), provider_webhook: ProviderWebhook });
const Many = Type.Object({ ok: Type.Literal(true), provider_webhooks: Type.Array(ProviderWebhook), meta: PageMeta });

export const providerWebhooksRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db, config } = app.deps;
  const secret = () => {
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    return config.appSecret;
  };
  const view = (row: Parameters<typeof toProviderWebhook>[0]) => toProviderWebhook(row, secret(), config.publicUrl);

  app.post(
    '',
    {
      schema: {
        tags: ['provider webhooks'],
        summary: 'Create a provider webhook',
        description:
          'An inbound URL for the events of a relay the team sends through: bounces, complaints and deliveries are matched to ' +
          'messages (by the id the relay returned when it accepted the message, or by its Message-ID) and recorded like ' +
          'bounces and complaints that arrive by mail. SendGrid needs its signed event webhook\'s verification key and Mailgun ' +
          'its webhook signing key (`signing_key`); SES is verified with the SNS signing certificate and its subscription is ' +
          'confirmed automatically; the Postmark URL carries basic credentials. Requests with a bad signature or credentials ' +
          `are refused with 401. At most ${MAX_PROVIDER_WEBHOOKS_PER_TEAM} per team.`,
        body: ProviderWebhookBody,
        response: withErrors({ 201: One }),
      },
    },
    async (request, reply) => {
      const row = await createProviderWebhook(db, secret(), request.auth!.teamId, request.body);
      return reply.code(201).send({ ok: true as const, provider_webhook: view(row) });
    },
  );

  app.get(
    '',
    {
      schema: {
        tags: ['provider webhooks'],
        summary: 'List provider webhooks',
        description: "The team's provider webhooks, newest first, with their URLs and counters; signing keys are never returned.",
        querystring: pageQuery(20, {}),
        response: withErrors({ 200: Many }),
      },
    },
    async (request) => {
      const page = request.query.page ?? 1;
      const perPage = request.query.per_page ?? 20;
      const { rows, total } = await listProviderWebhooks(db, request.auth!.teamId, { page, perPage });
      return { ok: true as const, provider_webhooks: rows.map(view), meta: pageMeta(page, perPage, total) };
    },
  );

  app.get(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['provider webhooks'],
        summary: 'Get a provider webhook',
        params: IdParams,
        response: withErrors({ 200: One }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'provider webhook');
      const row = await findProviderWebhook(db, request.auth!.teamId, request.params.id);
      if (!row) throw notFound('provider webhook');
      return { ok: true as const, provider_webhook: view(row) };
    },
  );

  app.delete(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: ['provider webhooks'],
        summary: 'Delete a provider webhook',
        description: 'Its URL answers 404 from then on. To change a URL or a signing key, create a new one and delete the old one.',
        params: IdParams,
        response: withErrors({ 200: Ok }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'provider webhook');
      await deleteProviderWebhook(db, request.auth!.teamId, request.params.id);
      return { ok: true as const };
    },
  );
};
