// Public endpoints that recipients' mail clients (and the machines in front of
// them) reach from a sent message: open pixel, click redirect, honeypot link and
// unsubscribe page. No API key: each URL carries the send log id and an HMAC
// over it (lib/tracking-links.ts), so a URL only ever acts on the message it was
// put into. Not in the OpenAPI document: they are not part of the API a team
// programs against, and their URLs are made by the sending engine.
import formbody from '@fastify/formbody';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { unsubscribeContacts } from '../contacts/queries.ts';
import { addUnsubscribeFact } from '../stats/deltas.ts';
import { recordHit, findRecipientForUnsubscribe, findSendForUnsubscribe, type HitInput } from './tracking.ts';
import { AppError } from '../lib/errors.ts';
import { statusOf } from '../http/errors.ts';
import { TrackingLinks, type LinkKind } from '../lib/tracking-links.ts';
import {
  alreadyUnsubscribedPage,
  confirmPage,
  donePage,
  errorPage,
  honeypotPage,
  linkNotFoundPage,
  PAGE_HEADERS,
} from './unsubscribe-page.ts';
import { UUID_RE } from '../http/schemas.ts';
import { normalizeEmail } from '../lib/text.ts';

// The classic transparent 1×1 GIF (43 bytes).
export const PIXEL_GIF = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');
const PIXEL_HEADERS = {
  'content-type': 'image/gif',
  'cache-control': 'no-store, no-cache, must-revalidate, max-age=0',
  pragma: 'no-cache',
  expires: '0',
  'x-robots-tag': 'noindex, nofollow',
};

// The one-click POST carries one short field; the page's form one more.
const FORM_BODY_LIMIT = 16 * 1024;
const MAX_UA_LENGTH = 1_000;
const ONE_CLICK_REASON = 'unsubscribed via one-click (List-Unsubscribe-Post)';
const LINK_REASON = 'unsubscribed via link';

type Params = { id: string; sig: string };

/** Control characters would make PostgreSQL (NUL) or a log line choke; a UA never needs them. */
function userAgentOf(request: FastifyRequest): string | null {
  const raw = request.headers['user-agent'];
  if (typeof raw !== 'string') return null;
  // eslint-disable-next-line no-control-regex
  const clean = raw.replace(/[\u0000-\u001f\u007f]/g, '').trim();
  return clean === '' ? null : clean.slice(0, MAX_UA_LENGTH);
}

function isHttpUrl(u: string): boolean {
  if (!URL.canParse(u)) return false;
  const { protocol } = new URL(u);
  return protocol === 'http:' || protocol === 'https:';
}

// The signed URL goes out as signed. Only when it holds characters a header
// cannot carry (spaces, non-ASCII) is it sent in its WHATWG serialisation,
// which percent-encodes them and points at the same resource.
function locationOf(u: string): string {
  return /^[\x21-\x7e]+$/.test(u) ? u : new URL(u).href;
}

/** RFC 8058: the body holds `List-Unsubscribe=One-Click` (urlencoded or multipart). */
function isOneClick(body: unknown): boolean {
  if (!body || typeof body !== 'object') return false;
  const v = (body as Record<string, unknown>)['List-Unsubscribe'];
  return typeof v === 'string' && v.trim().toLowerCase() === 'one-click';
}

// Only the one field RFC 8058 defines is read from a multipart body, so a few
// lines do instead of a multipart dependency. Line by line, anchored: no
// regex backtracking over a whole 16 KiB body.
const ONE_CLICK_PART = /^content-disposition:\s*form-data;(.*;)?\s*name="?List-Unsubscribe"?\s*(;|$)/i;
export function multipartIsOneClick(body: string): boolean {
  const lines = body.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    if (!ONE_CLICK_PART.test(lines[i]!)) continue;
    let j = i + 1;
    while (j < lines.length && lines[j] !== '') j++; // the part's other headers
    return lines[j + 1]?.trim().toLowerCase() === 'one-click';
  }
  return false;
}

function statusOfError(err: unknown): number {
  const s = err instanceof AppError ? statusOf(err.code) : ((err as { statusCode?: number }).statusCode ?? 500);
  return s >= 400 && s < 500 ? s : 500;
}

export const trackingRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, db } = app.deps;
  // main.ts always supplies a secret; without one nothing can be verified, so
  // every link is treated as invalid rather than failing the whole app.
  const links = config.appSecret ? new TrackingLinks(config.publicUrl, config.appSecret) : null;
  if (!links) app.log.warn('APP_SECRET is not set: tracking and unsubscribe links will not verify');

  const verified = (kind: LinkKind, id: string, sig: string, target = ''): boolean =>
    links !== null && UUID_RE.test(id) && links.verify(kind, id, sig, target);
  const limits = { maxHitsPerMessage: config.trackingMaxHitsPerMessage };

  // Valid links are answered and counted however often they come, from any
  // address: mail providers fetch through shared proxies. Only links that are
  // malformed, badly signed or name no message (someone probing) are limited
  // per client IP; past the limit they get a bare 429 that needs neither a
  // page nor the database, while valid links from the same address still work.
  const badLinkLimit = app.createRateLimit({
    max: config.trackingBadLinksPerMinute,
    timeWindow: 60_000,
    keyGenerator: (request) => `tracking-bad-link:${request.ip}`,
  });
  /** Counts a bad link against its IP; true when the 429 was sent. */
  async function refusedAsFlood(request: FastifyRequest, reply: FastifyReply): Promise<boolean> {
    const result = await badLinkLimit(request);
    if (result.isAllowed || !result.isExceeded) return false;
    await reply
      .code(429)
      .headers({ 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'retry-after': String(result.ttlInSeconds) })
      .send('Too many invalid links from this address. Try again later.\n');
    return true;
  }

  // Recipients' clients send forms, not JSON: only the bodies these pages can
  // get are parsed here, and anything else is accepted and ignored (a POST to
  // the unsubscribe URL is the request itself, whatever it carries).
  app.removeAllContentTypeParsers();
  await app.register(formbody, { bodyLimit: FORM_BODY_LIMIT });
  app.addContentTypeParser('multipart/form-data', { parseAs: 'string', bodyLimit: FORM_BODY_LIMIT }, (_req, body, done) => {
    done(null, multipartIsOneClick(String(body)) ? { 'List-Unsubscribe': 'One-Click' } : {});
  });
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: FORM_BODY_LIMIT }, (_req, _body, done) => done(null, {}));

  // People see these answers in a browser: a page, not the API's JSON envelope.
  app.setErrorHandler((err, request, reply) => {
    const status = statusOfError(err);
    if (status >= 500) request.log.error({ err }, 'tracking request failed');
    return reply.code(status).headers(PAGE_HEADERS).send(errorPage(status));
  });

  const notFound = (reply: FastifyReply) => reply.code(404).headers(PAGE_HEADERS).send(linkNotFoundPage());

  const hit = (request: FastifyRequest, kind: HitInput['kind'], sendLogId: string, url: string | null): HitInput => ({
    kind,
    sendLogId,
    url,
    method: request.method,
    ip: request.ip ?? null,
    userAgent: userAgentOf(request),
  });

  app.get('/t/o/:id/:file', { schema: { hide: true } }, async (request, reply) => {
    const { id, file } = request.params as { id: string; file: string };
    const sig = file.endsWith('.gif') ? file.slice(0, -4) : '';
    // The image, valid or not (up to the bad-link limit): a broken image
    // would tell a curious reader which links are live, and looks broken to people.
    let bad = !verified('open', id, sig);
    if (!bad) {
      try {
        bad = (await recordHit(db, hit(request, 'open', id, null), limits)).status === 'unknown_send';
      } catch (err) {
        request.log.error({ err }, 'recording an open failed');
      }
    }
    if (bad && (await refusedAsFlood(request, reply))) return reply;
    return reply.code(200).headers(PIXEL_HEADERS).send(PIXEL_GIF);
  });

  app.get('/t/c/:id/:sig', { schema: { hide: true } }, async (request, reply) => {
    const { id, sig } = request.params as Params;
    const u = (request.query as Record<string, unknown>).u;
    // Never a redirect to anything but the exact URL we signed: no open redirect.
    if (typeof u !== 'string' || !verified('click', id, sig, u) || !isHttpUrl(u)) {
      return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
    }
    // The target is signed, so a message that retention removed (unknown_send)
    // still redirects: only the count is gone with it.
    try {
      await recordHit(db, hit(request, 'click', id, u), limits);
    } catch (err) {
      // The URL is ours (signed), so the reader still gets there; only the count is lost.
      request.log.error({ err }, 'recording a click failed');
    }
    return reply
      .code(302)
      .headers({ location: locationOf(u), 'cache-control': 'no-store', 'referrer-policy': 'no-referrer' })
      .send();
  });

  app.get('/t/h/:id/:sig', { schema: { hide: true } }, async (request, reply) => {
    const { id, sig } = request.params as Params;
    let bad = !verified('honeypot', id, sig);
    if (!bad) {
      try {
        bad = (await recordHit(db, hit(request, 'honeypot', id, null), limits)).status === 'unknown_send';
      } catch (err) {
        request.log.error({ err }, 'recording a honeypot hit failed');
      }
    }
    if (bad && (await refusedAsFlood(request, reply))) return reply;
    // The same empty page whatever happened: nothing to learn, nothing to follow.
    return reply.code(200).headers(PAGE_HEADERS).send(honeypotPage());
  });

  app.get('/u/:id/:sig', { schema: { hide: true } }, async (request, reply) => {
    const { id, sig } = request.params as Params;
    if (!verified('unsubscribe', id, sig)) return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
    const send = await findSendForUnsubscribe(db, id);
    if (!send) return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
    const view = { email: send.email, teamName: send.team_name };
    const html = send.contact_status === 'unsubscribed' ? alreadyUnsubscribedPage(view) : confirmPage(view);
    return reply.code(200).headers(PAGE_HEADERS).send(html);
  });

  app.post('/u/:id/:sig', { schema: { hide: true }, bodyLimit: FORM_BODY_LIMIT }, async (request, reply) => {
    const { id, sig } = request.params as Params;
    if (!verified('unsubscribe', id, sig)) return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
    const oneClick = isOneClick(request.body);
    const send = await db.transaction().execute(async (tx) => {
      const found = await findSendForUnsubscribe(tx, id);
      if (!found) return undefined;
      // Unsubscribes the address the message went to, in the sending team only.
      const email = normalizeEmail(found.email);
      const r = await unsubscribeContacts(tx, found.team_id, [email], oneClick ? ONE_CLICK_REASON : LINK_REASON, oneClick ? 'one_click' : 'link');
      if (r.unsubscribed > 0) await addUnsubscribeFact(tx, found.team_id, email, id);
      return found;
    });
    if (!send) return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
    return reply.code(200).headers(PAGE_HEADERS).send(donePage({ email: send.email, teamName: send.team_name }));
  });

  // Recipient-signed links (tracking-links.ts): `/u/c/<team>/<contact>/<sig>`
  // or `/u/a/<team>/<base64url address>/<sig>`. They read no send log row.
  type RecipientParams = { by: string; team: string; ref: string; sig: string };
  /** The verified (team, by, value) of a recipient link, or null. */
  function recipientOf(p: RecipientParams): { teamId: string; by: 'c' | 'a'; value: string } | null {
    if (links === null || (p.by !== 'c' && p.by !== 'a') || !UUID_RE.test(p.team)) return null;
    if (p.by === 'c' && !UUID_RE.test(p.ref)) return null;
    if (!links.verifyRecipient(p.team, p.by, p.ref, p.sig)) return null;
    const value = p.by === 'c' ? p.ref : Buffer.from(p.ref, 'base64url').toString('utf8');
    return { teamId: p.team, by: p.by, value };
  }

  // Two static prefixes, not one `/u/:by/…`: beside `/u/:id/:sig` a second
  // parameter route at the same depth would share its node.
  for (const by of ['c', 'a'] as const) {
    app.get(`/u/${by}/:team/:ref/:sig`, { schema: { hide: true } }, async (request, reply) => {
      const r = recipientOf({ by, ...(request.params as Omit<RecipientParams, 'by'>) });
      const found = r && (await findRecipientForUnsubscribe(db, r.teamId, r.by, r.value, config.appSecret));
      if (!found) return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
      const view = { email: found.email, teamName: found.team_name };
      const html = found.contact_status === 'unsubscribed' || found.erased ? alreadyUnsubscribedPage(view) : confirmPage(view);
      return reply.code(200).headers(PAGE_HEADERS).send(html);
    });

    app.post(`/u/${by}/:team/:ref/:sig`, { schema: { hide: true }, bodyLimit: FORM_BODY_LIMIT }, async (request, reply) => {
      const r = recipientOf({ by, ...(request.params as Omit<RecipientParams, 'by'>) });
      if (!r) return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
      const oneClick = isOneClick(request.body);
      const found = await db.transaction().execute(async (tx) => {
        const f = await findRecipientForUnsubscribe(tx, r.teamId, r.by, r.value, config.appSecret);
        if (!f) return undefined;
        if (!f.erased) {
          const email = normalizeEmail(f.email);
          const u = await unsubscribeContacts(tx, f.team_id, [email], oneClick ? ONE_CLICK_REASON : LINK_REASON, oneClick ? 'one_click' : 'link');
          if (u.unsubscribed > 0) await addUnsubscribeFact(tx, f.team_id, email, null);
        }
        return f;
      });
      if (!found) return (await refusedAsFlood(request, reply)) ? reply : notFound(reply);
      return reply.code(200).headers(PAGE_HEADERS).send(donePage({ email: found.email, teamName: found.team_name }));
    });
  }
};
