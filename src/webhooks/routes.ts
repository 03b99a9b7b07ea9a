// Webhook API (docs/api.md, "Webhooks"): management, delivery log,
// resend and simulate. Registered at /public/v1/webhooks.
import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Agent } from 'undici';
import { notFound, validationFailed } from '../lib/errors.ts';
import { dateTimeValue, Ok, pageMeta, rejectInvalidId, withErrors } from '../http/schemas.ts';
import { samplePayload, type WebhookEvent } from './catalog.ts';
import { attemptDelivery, deliveryAgent } from './deliver.ts';
import {
  findDelivery,
  insertSimulatedDelivery,
  listDeliveries,
  recordAttempts,
  queuedAttemptOf,
  resendDelivery,
  toDeliveryView,
} from './deliveries.ts';
import { parseAllowList } from '../lib/net-guard.ts';
import { checkTargetUrl } from './guard.ts';
import { RECOVER_MAX_DAYS, recoverDeliveries } from './backlog.ts';
import { signingKeys } from './signing.ts';
import {
  createWebhook,
  deleteWebhook,
  findWebhook,
  listWebhooks,
  openSecret,
  toWebhookView,
  updateWebhook,
  webhookSecretBox,
  type WebhookPatch,
} from './queries.ts';
import {
  CreateWebhookBody,
  DeliveryListResponse,
  DeliveryParams,
  ListDeliveriesQuery,
  ListWebhooksQuery,
  RecoverBody,
  RecoverResponse,
  ResendResponse,
  SimulateBody,
  SimulateResponse,
  UpdateWebhookBody,
  WebhookListResponse,
  WebhookParams,
  WebhookResponse,
} from './schemas.ts';

const TAGS = ['webhooks'];


export const webhooksRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, db } = app.deps;
  const allow = parseAllowList(config.allowedPrivateTargets);
  const box = () => webhookSecretBox(config.appSecret);
  // Simulate sends from the API process; its agent has the same connect-time guard.
  let agent: Agent | undefined;
  app.addHook('onClose', async () => agent?.close());

  async function assertTarget(url: string | undefined): Promise<void> {
    if (url === undefined) return;
    const problem = await checkTargetUrl(url, allow, app.deps.resolveHost);
    if (problem) throw validationFailed([{ field: 'url', message: problem }], 'invalid webhook URL');
  }

  app.get(
    '',
    {
      schema: {
        tags: TAGS,
        summary: 'List webhooks',
        description: "The team's webhooks, newest first (no secrets in the list).",
        querystring: ListWebhooksQuery,
        response: withErrors({ 200: WebhookListResponse }),
      },
    },
    async (request) => {
      const page = request.query.page ?? 1;
      const perPage = request.query.per_page ?? 20;
      const { rows, total } = await listWebhooks(db, request.auth!.teamId, { page, perPage });
      return { ok: true as const, webhooks: rows.map((r) => toWebhookView(r, null)), meta: pageMeta(page, perPage, total) };
    },
  );

  app.post(
    '',
    {
      schema: {
        tags: TAGS,
        summary: 'Create a webhook',
        description:
          'Creates a webhook with a new random secret (returned here). `url` must be https and resolve only to public addresses. ' +
          'Creating an enabled webhook beyond 10 enabled per team is 422 `MAX_WEBHOOKS_EXCEEDED`.',
        body: CreateWebhookBody,
        response: withErrors({ 201: WebhookResponse }),
      },
    },
    async (request, reply) => {
      await assertTarget(request.body.url);
      const b = box();
      const row = await createWebhook(db, b, request.auth!.teamId, request.body);
      return reply.code(201).send({ ok: true as const, webhook: toWebhookView(row, b) as never });
    },
  );

  app.post(
    '/simulate',
    {
      schema: {
        tags: TAGS,
        summary: 'Send a test event',
        description:
          'With `webhook_id`: one signed delivery of a sample envelope is sent now (single attempt, no retries), logged like any ' +
          'delivery, and returned with the receiver\'s response code. Without: the sample envelope is returned.',
        body: SimulateBody,
        response: withErrors({ 200: SimulateResponse }, [404]),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const event = request.body.event as WebhookEvent;
      const id = randomUUID();
      const envelope = { id, event, team_id: teamId, timestamp: new Date().toISOString(), payload: samplePayload(event) };
      if (request.body.webhook_id === undefined) return { ok: true as const, payload: envelope } as never;
      const hook = await findWebhook(db, teamId, request.body.webhook_id);
      if (!hook) throw notFound('webhook');
      const b = box();
      const { lease } = await insertSimulatedDelivery(db, {
        id,
        teamId,
        webhookId: hook.id,
        event,
        envelope,
        leaseMs: config.webhookTimeoutMs + 30_000,
      });
      agent ??= deliveryAgent(allow, config.webhookTimeoutMs);
      const o = await attemptDelivery({
        agent,
        allow,
        url: hook.url,
        keys: signingKeys(openSecret(b, hook)),
        envelope,
        timeoutMs: config.webhookTimeoutMs,
        userAgent: `${config.serviceName}/1.0`,
      });
      await recordAttempts(db, [
        {
          id,
          webhook_id: hook.id,
          lease,
          at: o.at,
          status: o.ok ? 'success' : 'failed',
          response_code: o.response_code,
          response_body: o.response_body,
          error: o.error,
          duration_ms: o.duration_ms,
          next_attempt_at: null,
          gone: false,
        },
      ]);
      const row = await findDelivery(db, teamId, id);
      return { ok: true as const, delivery: toDeliveryView(row!) } as never;
    },
  );

  app.get(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'Get a webhook',
        params: WebhookParams,
        response: withErrors({ 200: WebhookResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'webhook');
      const row = await findWebhook(db, request.auth!.teamId, request.params.id);
      if (!row) throw notFound('webhook');
      return { ok: true as const, webhook: toWebhookView(row, box()) as never };
    },
  );

  const update = async (teamId: string, id: string, patch: WebhookPatch) => {
    const b = box();
    const row = await updateWebhook(db, b, teamId, id, patch);
    if (!row) throw notFound('webhook');
    return { ok: true as const, webhook: toWebhookView(row, b) as never };
  };

  app.patch(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'Update a webhook',
        description:
          'Any of `url`, `events`, `is_enabled`, `source`, `description`. `is_enabled: true` on a disabled webhook enables it ' +
          '(limit check, new secret); nothing else changes the secret. `source: null` unlocks.',
        params: WebhookParams,
        body: UpdateWebhookBody,
        response: withErrors({ 200: WebhookResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'webhook');
      // An unknown webhook is 404 before its URL is judged.
      if (!(await findWebhook(db, request.auth!.teamId, request.params.id))) throw notFound('webhook');
      await assertTarget(request.body.url);
      return update(request.auth!.teamId, request.params.id, request.body);
    },
  );

  app.delete(
    '/:id',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'Delete a webhook',
        description: 'Removes the webhook and its delivery log; pending deliveries are cancelled.',
        params: WebhookParams,
        response: withErrors({ 200: Ok }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'webhook');
      if (!(await deleteWebhook(db, request.auth!.teamId, request.params.id))) throw notFound('webhook');
      return { ok: true as const };
    },
  );

  for (const [action, isEnabled] of [['enable', true], ['disable', false]] as const) {
    app.post(
      `/:id/${action}`,
      {
        attachValidation: true,
        schema: {
          tags: TAGS,
          summary: isEnabled ? 'Enable a webhook' : 'Disable a webhook',
          description: isEnabled
            ? 'Resumes delivery (deliveries paused while disabled go out, signed with the new secret). A new secret is issued ' +
              'when the webhook was disabled. Beyond 10 enabled webhooks: 422 `MAX_WEBHOOKS_EXCEEDED`.'
            : 'Pauses delivery without deleting: pending deliveries, and every subscribed event from now on, wait as `pending` ' +
              'and are sent oldest first after the enable. The paused backlog keeps at most 7 days and 100,000 deliveries ' +
              '(configurable); older ones are marked `failed` with the reason in `last_error`.',
          params: WebhookParams,
          response: withErrors({ 200: WebhookResponse }, [404]),
        },
      },
      async (request) => {
        rejectInvalidId(request, 'webhook');
        return update(request.auth!.teamId, request.params.id, { is_enabled: isEnabled });
      },
    );
  }

  app.get(
    '/:id/deliveries',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'List deliveries of a webhook',
        description: 'Newest first, with every attempt; filters `status` (pending, success, failed) and `event`.',
        params: WebhookParams,
        querystring: ListDeliveriesQuery,
        response: withErrors({ 200: DeliveryListResponse }, [404]),
      },
    },
    async (request) => {
      rejectInvalidId(request, 'webhook');
      const teamId = request.auth!.teamId;
      if (!(await findWebhook(db, teamId, request.params.id))) throw notFound('webhook');
      const page = request.query.page ?? 1;
      const perPage = request.query.per_page ?? 20;
      const { rows, total } = await listDeliveries(db, teamId, request.params.id, {
        status: request.query.status,
        event: request.query.event,
        page,
        perPage,
      });
      return { ok: true as const, deliveries: rows.map(toDeliveryView), meta: pageMeta(page, perPage, total) };
    },
  );

  app.post(
    '/:id/deliveries/:delivery_id/resend',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'Resend a delivery',
        description:
          'Queues a new attempt for the same envelope id, due now, starting a fresh sequence of up to 7 attempts. Answers 202 with ' +
          'the queued `attempt` (its number and when it is due) and the delivery, now `pending` (its response fields still show ' +
          'the last attempt until the new one is made).',
        params: DeliveryParams,
        response: withErrors({ 202: ResendResponse }, [404]),
      },
    },
    async (request, reply) => {
      rejectInvalidId(request, 'delivery');
      const row = await resendDelivery(db, request.auth!.teamId, request.params.id, request.params.delivery_id);
      if (!row) throw notFound('delivery');
      return reply.code(202).send({ ok: true as const, attempt: queuedAttemptOf(row), delivery: toDeliveryView(row) });
    },
  );

  app.post(
    '/:id/recover',
    {
      attachValidation: true,
      schema: {
        tags: TAGS,
        summary: 'Recover failed deliveries',
        description:
          `Queues a new attempt sequence (up to 7 attempts, the first now) for every \`failed\` delivery of this webhook created ` +
          `in [\`since\`, \`until\`), keeping each envelope \`id\`, oldest first. \`since\` may be at most ${RECOVER_MAX_DAYS} days back; ` +
          '`until` defaults to now. On a disabled webhook they wait with the paused backlog and are sent after the enable.',
        params: WebhookParams,
        body: RecoverBody,
        response: withErrors({ 202: RecoverResponse }, [404]),
      },
    },
    async (request, reply) => {
      rejectInvalidId(request, 'webhook');
      const now = Date.now();
      const since = dateTimeValue(request.body.since);
      // Nothing is created after now: a later `until` means now (and keeps a year
      // past 9999, which JavaScript holds but the driver cannot send, off the
      // database: a 500 found by the contract fuzz).
      const until = request.body.until === undefined ? new Date(now) : new Date(Math.min(dateTimeValue(request.body.until).getTime(), now));
      const problems = [];
      if (since.getTime() < now - RECOVER_MAX_DAYS * 86_400_000) {
        problems.push({ field: 'since', message: `must be at most ${RECOVER_MAX_DAYS} days back` });
      }
      if (until.getTime() < since.getTime()) problems.push({ field: 'until', message: 'must not be before since' });
      if (problems.length > 0) throw validationFailed(problems, 'invalid recover window');
      const res = await recoverDeliveries(db, request.auth!.teamId, request.params.id, since, until);
      if (!res.found) throw notFound('webhook');
      return reply.code(202).send({ ok: true as const, queued: res.queued });
    },
  );
};
