// Builds the Fastify app: plugins, operations routes and the public API under
// /public/v1. server.ts only listens; tests build this and use app.inject.
import { randomUUID } from 'node:crypto';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { Config } from './config.ts';
import type { Db } from './db/pool.ts';
import { ApiKeyCache, requireApiKey, resolveApiKey, resolveApiKeyHook } from './teams/auth.ts';
import { AppError } from './lib/errors.ts';
import { installErrorHandlers, sendError } from './http/errors.ts';
import { installApiIntake, installBodyLimits } from './http/intake.ts';
import { installJsonParser } from './http/json-body.ts';
import { validatorCompiler } from './http/schemas.ts';
import { installMetrics } from './ops/metrics.ts';
import { operationsRoutes } from './ops/routes.ts';
import { campaignsRoutes } from './campaigns/routes.ts';
import { contactsRoutes } from './contacts/routes.ts';
import { suppressionsRoutes } from './contacts/suppression-routes.ts';
import { dashboardNotFoundPage, dashboardRoutes } from './dashboard/plugin.ts';
import { ingestRoutes } from './ingest/routes.ts';
import { mailAccountsRoutes } from './mail/accounts-routes.ts';
import { dkimRoutes } from './mail/dkim-routes.ts';
import type { TxtResolver } from './mail/dns-check.ts';
import { emailsRoutes } from './mail/emails-routes.ts';
import { statsRoutes } from './stats/routes.ts';
import { trackingRoutes } from './mail/tracking-routes.ts';
import { pingRoutes } from './teams/routes.ts';
import { templatesRoutes } from './templates/routes.ts';
import { webhooksRoutes } from './webhooks/routes.ts';
import type { Resolver } from './lib/net-guard.ts';
import { providerReceiveRoutes, type ProviderReceiveOptions } from './inbound/providers/receive-routes.ts';
import { providerWebhooksRoutes } from './inbound/providers/routes.ts';
import { mailAccountImapRoutes } from './inbound/imap/routes.ts';
import { leasedRedisStore } from './http/rate-limit-store.ts';

export type AppDeps = {
  config: Config;
  pool: pg.Pool;
  db: Db;
  redis?: Redis;
  /** A pino logger to use; default: a new one at LOG_LEVEL. */
  logger?: FastifyBaseLogger;
  /** How long a key lookup is trusted: bounds revocation delay across processes. */
  keyCacheTtlMs?: number;
  /** Resolves webhook and SMTP host names when they are saved; default: the system resolver. */
  resolveHost?: Resolver;
  /** Provider webhooks: SNS certificate fetch and subscription confirmation (tests inject their own), the feedback core. */
  inboundProviders?: Omit<ProviderReceiveOptions, 'registry'>;
  /** TXT lookups of the DKIM activation and the DNS check; default: the system's DNS servers. */
  resolveTxt?: TxtResolver;
};

declare module 'fastify' {
  interface FastifyInstance {
    deps: AppDeps;
    apiKeys: ApiKeyCache;
  }
}

export const OPENAPI_PATH = '/public/v1/openapi.json';

/** Timeouts and per-socket limits of the HTTP server (docs/security.md, "Request intake limits"). */
function serverOptions(config: Config) {
  const t = config.intake;
  return {
    connectionTimeout: t.connectionTimeoutMs,
    keepAliveTimeout: t.keepAliveTimeoutMs,
    requestTimeout: t.requestTimeoutMs,
    maxRequestsPerSocket: t.maxRequestsPerSocket,
    http: {
      headersTimeout: t.headersTimeoutMs,
      // Node checks the headers and request timeouts on this interval (30 s by
      // default, which would let a slow client hold a socket 30 s past them).
      connectionsCheckingInterval: Math.min(1_000, Math.max(100, Math.floor(t.headersTimeoutMs / 4))),
    },
  };
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config } = deps;
  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: { level: config.logLevel } }),
    // Each route gets its own limit (http/intake.ts); this one is never reached.
    bodyLimit: config.intake.apiBodyLimitBytes,
    ...serverOptions(config),
    genReqId: () => randomUUID(),
    trustProxy: process.env.TRUST_PROXY === 'true',
    return503OnClosing: true,
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    // The router's own errors (a path parameter over maxParamLength, a broken
    // percent-encoding) skip the error handler; without this they answer
    // Fastify's body and status (414, 400) instead of the envelope.
    // A block body: a FastifyReply is thenable, and Fastify ignores this hook's return value.
    frameworkErrors: (err, request, reply) => {
      sendError(reply.header('x-request-id', request.id), err, request);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.decorate('deps', deps);
  app.decorate('apiKeys', new ApiKeyCache(deps.db, deps.keyCacheTtlMs));
  app.decorateRequest('auth', null);
  app.setValidatorCompiler(validatorCompiler);
  // JSON only: a text/plain body is 415, not a string that fails validation.
  app.removeContentTypeParser('text/plain');
  installJsonParser(app, { maxValues: config.intake.jsonMaxValues, poolThresholdBytes: config.intake.jsonPoolThresholdBytes });
  installBodyLimits(app, config);
  // Node drops connections past this cap at once (it counts sockets, idle keep-alive ones included).
  app.server.maxConnections = config.intake.maxConnections;
  // Callback style, as the other per-request hooks of every route: an async
  // hook costs a promise and a microtask on every request.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    done();
  });
  // Registered at the root with global: false, so the limiter runs exactly where
  // we put it: after the key is resolved (it keys on the API key), and for
  // unknown /public/v1 paths too, so every API answer carries the headers.
  await app.register(rateLimit, {
    global: false,
    max: config.rateLimitPerMinute,
    timeWindow: 60_000,
    // With Redis, counters shared by all API processes, taken in leases (rate-limit-store.ts).
    store: deps.redis ? leasedRedisStore(deps.redis, 'plover:rl:', app.log) : undefined,
    // Fail open: a Redis outage must not take the API down with it.
    skipOnError: true,
    keyGenerator: (request) => (request.auth ? `k:${request.auth.keyId}` : `ip:${request.ip}`),
    errorResponseBuilder: (_request, context) =>
      new AppError('RATE_LIMITED', `rate limit exceeded: ${context.max} requests per minute; retry in ${context.after}`),
  });
  const resolveKey = resolveApiKeyHook(app.apiKeys);
  const limit = app.rateLimit();
  installErrorHandlers(app, async (request, reply) => {
    if (!request.url.startsWith('/public/v1/')) return;
    await resolveApiKey(app.apiKeys, request);
    await limit.call(app, request, reply);
  }, dashboardNotFoundPage);

  const metrics = installMetrics(app, config.intake.metricsToken);

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: `${config.serviceName} public API`,
        version: '1.0.0',
        description: 'Team-scoped e-mail marketing and webhook service. Every /public/v1 route needs a team API key in `x-api-key`.',
      },
      servers: [{ url: config.publicUrl }],
      components: { securitySchemes: { apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' } } },
      security: [{ apiKey: [] }],
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
  // Served without a key (like /docs, which loads it): the contract is public.
  app.get(OPENAPI_PATH, { schema: { hide: true } }, async () => app.swagger());

  operationsRoutes(app, deps.pool);
  await app.register(trackingRoutes);
  await app.register(providerReceiveRoutes, { registry: metrics, ...deps.inboundProviders });

  await app.register(
    async (api) => {
      api.addHook('onRequest', resolveKey);
      api.addHook('onRequest', limit);
      requireApiKey(api);
      installApiIntake(api, config);
      await api.register(pingRoutes);
      await api.register(contactsRoutes, { prefix: '/email/contacts' });
      await api.register(templatesRoutes, { prefix: '/email/templates' });
      await api.register(mailAccountsRoutes, { prefix: '/email/mail-accounts' });
      await api.register(dkimRoutes, { prefix: '/email/mail-accounts' });
      await api.register(campaignsRoutes, { prefix: '/email/campaigns' });
      await api.register(webhooksRoutes, { prefix: '/webhooks' });
      await api.register(ingestRoutes, { prefix: '/email/events' });
      await api.register(emailsRoutes, { prefix: '/email/emails' });
      await api.register(suppressionsRoutes, { prefix: '/email/suppressions' });
      await api.register(providerWebhooksRoutes, { prefix: '/email/provider-webhooks' });
      await api.register(mailAccountImapRoutes, { prefix: '/email/mail-accounts' });
      await api.register(statsRoutes, { prefix: '/email' });
    },
    { prefix: '/public/v1' },
  );
  app.decorate('dashboardRouteTable', []);
  await app.register(dashboardRoutes);

  return app;
}
