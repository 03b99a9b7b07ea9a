// Request intake: how much of a body each route may read, and the rule that no
// body is read or parsed before the request is known to be answerable
// (docs/api.md, "Envelope and errors"; limits in docs/security.md, "Request
// intake limits").
//
// - Every route gets a body limit by its class (bulk, template, api, dashboard,
//   tracking), set once here when the route is added, so a new route cannot
//   fall back to a larger global limit.
// - Unknown paths and methods (404/405) are answered in onRequest, before
//   Fastify would read and parse a body for its not-found handler.
// - A request answered without reading its body (401, 404, 405, 415, 429, a
//   dashboard redirect) closes its connection when the body is large or of
//   unknown length: otherwise Node reads the whole body to reuse the socket.
// - API routes: an empty body is no body, under any content type (clients
//   send `application/x-www-form-urlencoded` or `application/json` with zero
//   bytes on bodyless actions); a route that takes JSON sees `{}`. A non-empty
//   body under a non-JSON content type is 415, from the headers alone.
// - A team's bulk requests in flight in this process are capped, so one team's
//   imports cannot fill the parse pool and the event loop for everyone.
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import type { Config } from '../config.ts';
import { AppError } from './errors.ts';
import { hasBody, leaveBodyUnread } from './unread-body.ts';

export type BodyClass = 'bulk' | 'template' | 'api' | 'dashboard' | 'tracking';

declare module 'fastify' {
  interface FastifyContextConfig {
    bodyClass?: BodyClass;
  }
}

/** Fixed: the one-click unsubscribe POST carries one short field (RFC 8058). */
export const TRACKING_BODY_LIMIT = 16 * 1024;
const BULK_ROUTES = new Set([
  '/public/v1/email/contacts/bulk-upsert',
  '/public/v1/email/contacts/bulk-unsubscribe',
  '/public/v1/email/emails/batch',
  '/public/v1/email/suppressions',
]);
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export function bodyClassOf(url: string): BodyClass {
  if (url.startsWith('/public/v1/')) {
    if (BULK_ROUTES.has(url)) return 'bulk';
    if (url === '/public/v1/email/templates' || url.startsWith('/public/v1/email/templates/')) return 'template';
    return 'api';
  }
  if (url.startsWith('/t/') || url.startsWith('/u/')) return 'tracking';
  // The dashboard's template editor and preview take template-sized bodies.
  if (url === '/templates' || url.startsWith('/templates/')) return 'template';
  return 'dashboard';
}

export function bodyLimitOf(cls: BodyClass, config: Config): number {
  const { intake } = config;
  switch (cls) {
    case 'bulk':
      return config.bodyLimitBytes;
    case 'template':
      return intake.templateBodyLimitBytes;
    case 'api':
      return intake.apiBodyLimitBytes;
    case 'dashboard':
      return intake.dashboardBodyLimitBytes;
    case 'tracking':
      return TRACKING_BODY_LIMIT;
  }
}

/** onRoute: every route's body limit by its class; a route's own explicit limit stands. */
export function installBodyLimits(app: FastifyInstance, config: Config): void {
  app.addHook('onRoute', (route: RouteOptions) => {
    const cls = bodyClassOf(route.url);
    route.config = { ...route.config, bodyClass: cls };
    route.bodyLimit ??= bodyLimitOf(cls, config);
  });
}

function mediaTypeOf(request: FastifyRequest): string {
  const raw = request.headers['content-type'];
  return (typeof raw === 'string' ? raw : '').split(';')[0]!.trim().toLowerCase();
}

/**
 * Per-process count of bulk requests in flight, per team and in all. The
 * per-team cap keeps one team from taking every slot; the total bounds the
 * memory of bodies near the 10 MiB limit held at once whatever the number of
 * teams (each costs tens of MiB between its buffer, its string and the parse).
 */
export class HeavyRequestGate {
  private readonly inFlight = new Map<string, number>();
  private total = 0;
  readonly max: number;
  readonly maxTotal: number;
  constructor(max: number, maxTotal = Infinity) {
    this.max = max;
    this.maxTotal = maxTotal;
  }
  /**
   * Takes a slot for the team: 'team' when the team has `max` in flight,
   * 'total' when the process has `maxTotal`, else 'ok' (the slot is freed when
   * the response closes).
   */
  enter(teamId: string, reply: FastifyReply): 'ok' | 'team' | 'total' {
    const n = this.inFlight.get(teamId) ?? 0;
    if (n >= this.max) return 'team';
    if (this.total >= this.maxTotal) return 'total';
    this.inFlight.set(teamId, n + 1);
    this.total++;
    // 'close' fires exactly once, after the answer or when the client goes away.
    reply.raw.once('close', () => {
      this.total--;
      const left = (this.inFlight.get(teamId) ?? 1) - 1;
      if (left <= 0) this.inFlight.delete(teamId);
      else this.inFlight.set(teamId, left);
    });
    return 'ok';
  }
  count(teamId: string): number {
    return this.inFlight.get(teamId) ?? 0;
  }
}

/**
 * The API scope's intake, after the key check (auth.ts, preParsing): the
 * heavy-request gate, empty bodies as no body, 415 from the headers, `{}` for
 * routes that take JSON and got nothing.
 */
export function installApiIntake(api: FastifyInstance, config: Config): HeavyRequestGate {
  const gate = new HeavyRequestGate(config.intake.heavyRequestsPerTeam, config.intake.heavyRequestsTotal);
  // Callback style (no promise per request); a throw is answered as a
  // rejected async hook would be.
  api.addHook('preParsing', (request, reply, _payload, done) => {
    intake(request, reply);
    done();
  });
  function intake(request: FastifyRequest, reply: FastifyReply): void {
    if (!BODY_METHODS.has(request.method)) return;
    const entered = request.routeOptions.config.bodyClass === 'bulk' && request.auth ? gate.enter(request.auth.teamId, reply) : 'ok';
    if (entered === 'team') {
      leaveBodyUnread(request, reply);
      throw new AppError(
        'RATE_LIMITED',
        `at most ${gate.max} bulk requests of a team are handled at once; retry when one has finished`,
        undefined,
        { 'retry-after': '1' },
      );
    }
    if (entered === 'total') {
      leaveBodyUnread(request, reply);
      throw new AppError('SERVICE_UNAVAILABLE', 'the server is handling as many bulk requests as it takes at once; retry shortly', undefined, {
        'retry-after': '1',
      });
    }
    if (!hasBody(request)) {
      // Zero bytes under any content type: Fastify then skips the parser.
      delete request.raw.headers['content-type'];
      return;
    }
    const type = mediaTypeOf(request);
    // A chunked body of unknown length under a non-JSON type reaches the
    // catch-all parser below, which reads at most the route's limit.
    if (type !== 'application/json' && request.headers['content-length'] !== undefined) {
      leaveBodyUnread(request, reply);
      throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be application/json');
    }
  }
  api.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => {
    if ((body as Buffer).length === 0) return done(null, undefined);
    done(new AppError('UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be application/json'), undefined);
  });
  api.addHook('preValidation', (request, _reply, done) => {
    if (request.body === undefined && request.routeOptions.schema?.body !== undefined) request.body = {};
    done();
  });
  return gate;
}
