// POST /inbound/<provider>/<token>: where a relay (SES through SNS, SendGrid,
// Postmark, Mailgun) posts its bounce, complaint and delivery events for one
// team. No API key: the unguessable token names the team's webhook, and each
// provider's own proof is checked (SNS certificate signature, SendGrid ECDSA,
// Mailgun HMAC, Postmark basic credentials in the URL). Not in openapi.json:
// these URLs are given to a provider, not programmed against.
//
// Order, so nothing is read before the request is known to be answerable: the
// token (404) and Postmark's credentials (401) are checked from the headers,
// then at most the route's body limit is read, then the signature (401), then
// the payload (422), then the items are applied. Unmatched events are counted
// and answered 200: a provider retries a non-2xx answer, and an event that
// matches nothing now never will.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Counter, type Registry } from 'prom-client';
import type { ProviderName } from '../../db/schema-inbound-providers.ts';
import { parseJsonRequestBody } from '../../http/json-body.ts';
import { leaveBodyUnread } from '../../http/unread-body.ts';
import { AppError, validationFailed } from '../../lib/errors.ts';
import { applyProviderFeedback, type ApplyProviderFeedback } from './apply.ts';
import {
  freshTimestamp,
  parseMailgun,
  parsePostmark,
  parseSendgrid,
  parseSesNotification,
  sendgridPublicKey,
  verifyBasic,
  verifyMailgun,
  verifySendgrid,
  type ParseResult,
} from './events.ts';
import { PROVIDERS, POSTMARK_USER, countEvents, pinSnsTopic, webhookForToken, type ReceivingWebhook } from './settings.ts';
import {
  asSnsMessage,
  CertificateCache,
  confirmSnsSubscription,
  fetchSnsCertificate,
  isSnsUrl,
  verifySnsMessage,
  type CertificateFetcher,
  type SubscriptionConfirmer,
} from './sns.ts';

export type ProviderReceiveOptions = {
  registry?: Registry;
  /** Tests sign SNS messages with their own certificate; production fetches from SNS hosts only. */
  fetchCertificate?: CertificateFetcher;
  confirmSubscription?: SubscriptionConfirmer;
  apply?: ApplyProviderFeedback;
};

declare module 'fastify' {
  interface FastifyRequest {
    providerWebhook?: ReceivingWebhook;
  }
}

type Params = { provider: string; token: string };

const SENDGRID_SIGNATURE = 'x-twilio-email-event-webhook-signature';
const SENDGRID_TIMESTAMP = 'x-twilio-email-event-webhook-timestamp';

function refused(reason: string, message: string): AppError {
  return Object.assign(new AppError('UNAUTHORIZED', message), { refusedFor: reason });
}

export async function providerReceiveRoutes(app: FastifyInstance, opts: ProviderReceiveOptions): Promise<void> {
  const { config, db } = app.deps;
  const limits = config.inboundProviders;
  const appSecret = config.appSecret;
  if (!appSecret) throw new Error('provider webhooks need APP_SECRET (or the embedded database secret)');
  const certs = new CertificateCache(opts.fetchCertificate ?? fetchSnsCertificate);
  const confirm = opts.confirmSubscription ?? confirmSnsSubscription;
  const apply = opts.apply ?? applyProviderFeedback;
  const registers = opts.registry ? [opts.registry] : [];
  const refusedTotal = new Counter({
    name: 'plover_provider_webhook_refused_total',
    help: 'Provider webhook requests refused: bad or missing signature or credentials, wrong SNS topic',
    labelNames: ['provider', 'reason'] as const,
    registers,
  });
  const eventsTotal = new Counter({
    name: 'plover_provider_webhook_events_total',
    help: 'Provider events received, by outcome (matched, unmatched, ignored)',
    labelNames: ['provider', 'outcome'] as const,
    registers,
  });

  // Every body is read raw, whatever its type (SNS posts JSON as text/plain),
  // and parsed here after the token is known.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  const onRequest = async (request: FastifyRequest<{ Params: Params }>, reply: FastifyReply) => {
    const { provider, token } = request.params;
    const known = (PROVIDERS as readonly string[]).includes(provider);
    const webhook = known ? await webhookForToken(db, appSecret, provider as ProviderName, token) : undefined;
    if (!webhook) {
      leaveBodyUnread(request, reply);
      throw new AppError('NOT_FOUND', 'no such inbound URL');
    }
    if (webhook.provider === 'postmark' && !verifyBasic(request.headers.authorization, POSTMARK_USER, webhook.secret ?? '')) {
      refusedTotal.inc({ provider: 'postmark', reason: 'credentials' });
      leaveBodyUnread(request, reply);
      reply.header('www-authenticate', 'Basic realm="inbound"');
      throw new AppError('UNAUTHORIZED', 'the URL\'s basic credentials are missing or wrong');
    }
    if (webhook.provider === 'sendgrid' && (!request.headers[SENDGRID_SIGNATURE] || !request.headers[SENDGRID_TIMESTAMP])) {
      refusedTotal.inc({ provider: 'sendgrid', reason: 'signature' });
      leaveBodyUnread(request, reply);
      throw new AppError('UNAUTHORIZED', `${SENDGRID_SIGNATURE} and ${SENDGRID_TIMESTAMP} are required (enable the signed event webhook)`);
    }
    request.providerWebhook = webhook;
  };

  const parseBody = async (raw: unknown): Promise<unknown> => {
    if (!Buffer.isBuffer(raw) || raw.length === 0) throw validationFailed([{ field: '(body)', message: 'is empty' }], 'request body is required');
    // Not moved (`owned` false): the signature checks read `raw` afterwards.
    return parseJsonRequestBody(raw, { maxValues: config.intake.jsonMaxValues, poolThresholdBytes: config.intake.jsonPoolThresholdBytes });
  };

  /** Verifies and parses by provider; SNS control messages are answered here (null). */
  const itemsOf = async (webhook: ReceivingWebhook, request: FastifyRequest, raw: Buffer, body: unknown): Promise<ParseResult | null> => {
    switch (webhook.provider) {
      case 'ses': {
        const m = asSnsMessage(body);
        if (typeof m === 'string') throw validationFailed([{ field: '(body)', message: m }], 'not an SNS message');
        const verdict = await verifySnsMessage(m, certs);
        if (!verdict.ok) throw refused(verdict.reason, 'the SNS signature could not be verified');
        if (m.Type === 'UnsubscribeConfirmation') return null;
        if (!(await pinSnsTopic(db, webhook.id, m.TopicArn))) throw refused('topic', 'this URL is subscribed to another SNS topic');
        if (m.Type === 'SubscriptionConfirmation') {
          if (!isSnsUrl(m.SubscribeURL!)) throw refused('certificate_url', 'SubscribeURL is not an SNS URL');
          try {
            await confirm(m.SubscribeURL!);
          } catch (err) {
            request.log.warn({ err, provider_webhook_id: webhook.id }, 'could not confirm the SNS subscription');
            throw new AppError('SERVICE_UNAVAILABLE', 'could not confirm the subscription with SNS; it will send the confirmation again', undefined, {
              'retry-after': '60',
            });
          }
          request.log.info({ provider_webhook_id: webhook.id, topic: m.TopicArn }, 'confirmed an SNS subscription');
          return null;
        }
        return parseSesNotification(m.Message, limits.webhookMaxEvents);
      }
      case 'sendgrid': {
        const key = sendgridPublicKey(webhook.secret ?? '');
        const timestamp = String(request.headers[SENDGRID_TIMESTAMP]);
        if (!key || !verifySendgrid(key, String(request.headers[SENDGRID_SIGNATURE]), timestamp, raw)) throw refused('signature', 'the event webhook signature does not verify');
        if (!freshTimestamp(timestamp, limits.webhookMaxAgeS)) throw refused('stale', 'the signed timestamp is outside the replay window');
        return parseSendgrid(body, limits.webhookMaxEvents);
      }
      case 'mailgun': {
        const signature = body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>).signature : null;
        const sig = signature && typeof signature === 'object' ? (signature as Record<string, unknown>) : null;
        if (!verifyMailgun(webhook.secret ?? '', sig)) throw refused('signature', 'the webhook signature does not verify');
        if (!freshTimestamp(sig!.timestamp, limits.webhookMaxAgeS)) throw refused('stale', 'the signed timestamp is outside the replay window');
        return parseMailgun(body);
      }
      case 'postmark':
        return parsePostmark(body);
    }
  };

  app.post<{ Params: Params }>(
    '/inbound/:provider/:token',
    { bodyLimit: limits.webhookBodyLimitBytes, onRequest, schema: { hide: true } },
    async (request, reply) => {
      const webhook = request.providerWebhook!;
      const raw = request.body as Buffer;
      const body = await parseBody(raw);
      let result: ParseResult | null;
      try {
        result = await itemsOf(webhook, request, raw, body);
      } catch (err) {
        const reason = (err as { refusedFor?: string }).refusedFor;
        if (reason) {
          refusedTotal.inc({ provider: webhook.provider, reason });
          request.log.warn({ provider_webhook_id: webhook.id, provider: webhook.provider, reason }, 'refused a provider webhook request');
        }
        throw err;
      }
      if (result === null) return reply.send({ ok: true, received: 0, matched: 0, unmatched: 0, ignored: 0 });
      if ('error' in result) throw validationFailed([{ field: '(body)', message: result.error }], 'the payload is not one this provider sends');
      const { matched, unmatched } = await apply(db, webhook.teamId, result.items, {
        softBounceLimit: config.inbound.softBounceLimit,
        softBounceDays: config.inbound.softBounceDays,
        log: request.log,
      });
      await countEvents(db, webhook.id, result.items.length, unmatched);
      if (matched) eventsTotal.inc({ provider: webhook.provider, outcome: 'matched' }, matched);
      if (unmatched) {
        eventsTotal.inc({ provider: webhook.provider, outcome: 'unmatched' }, unmatched);
        request.log.info({ provider_webhook_id: webhook.id, provider: webhook.provider, unmatched }, 'provider events matched no message');
      }
      if (result.ignored) eventsTotal.inc({ provider: webhook.provider, outcome: 'ignored' }, result.ignored);
      return reply.send({ ok: true, received: result.items.length, matched, unmatched, ignored: result.ignored });
    },
  );
}
