// Sessions and CSRF for the dashboard.
//
// Session: a random token in a signed, HttpOnly, SameSite=Lax cookie (Secure
// when PUBLIC_URL is https), looked up by its hash in dashboard_sessions on each
// request, so sign-out and revocation take effect at once.
//
// CSRF: every form carries a token that is an HMAC of the session id (or, before
// sign-in, of a random pre-session cookie), checked on every POST. A page of
// another site cannot read it, and SameSite=Lax already keeps the session cookie
// off cross-site POSTs: two independent defences.
import { createHmac, createSecretKey, hkdfSync, randomBytes, timingSafeEqual, type KeyObject } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { findSession, SESSION_DAYS, type SessionUser } from './users.ts';

export const SESSION_COOKIE = 'plv_session';
const PRE_COOKIE = 'plv_pre';

declare module 'fastify' {
  interface FastifyRequest {
    dashboardUser: SessionUser | null;
  }
}

export class DashboardKeys {
  readonly cookie: string;
  readonly csrf: KeyObject;
  readonly secure: boolean;
  constructor(appSecret: string, publicUrl: string) {
    // Separate keys per purpose, derived from APP_SECRET, so no value signed for
    // one use verifies for another.
    const derive = (info: string) => Buffer.from(hkdfSync('sha256', appSecret, 'plover-dashboard', info, 32));
    this.cookie = derive('cookie').toString('hex');
    this.csrf = createSecretKey(derive('csrf'));
    this.secure = publicUrl.startsWith('https:');
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    dashboardKeys: DashboardKeys;
  }
}

function cookieOptions(app: FastifyInstance, maxAgeSeconds?: number) {
  return {
    path: '/',
    httpOnly: true,
    sameSite: 'lax' as const,
    secure: app.dashboardKeys.secure,
    signed: true,
    ...(maxAgeSeconds !== undefined ? { maxAge: maxAgeSeconds } : {}),
  };
}

function readSigned(request: FastifyRequest, name: string): string | undefined {
  const raw = request.cookies[name];
  if (!raw) return undefined;
  const { valid, value } = request.unsignCookie(raw);
  return valid && value ? value : undefined;
}

export function setSessionCookie(reply: FastifyReply, token: string): void {
  reply.setCookie(SESSION_COOKIE, token, cookieOptions(reply.server, SESSION_DAYS * 86_400));
}

export function clearSessionCookie(reply: FastifyReply): void {
  reply.clearCookie(SESSION_COOKIE, { path: '/' });
}

/** onRequest: resolves the session cookie to the signed-in user, if any. */
export async function loadSession(this: FastifyInstance, request: FastifyRequest): Promise<void> {
  request.dashboardUser = null;
  const token = readSigned(request, SESSION_COOKIE);
  if (token && token.length <= 100) request.dashboardUser = (await findSession(this.deps.db, token)) ?? null;
}

/** True when the request carries a valid pre-session cookie: a signed-out form (sign-in, set-password) can then be genuine. */
export function hasPreSession(request: FastifyRequest): boolean {
  return readSigned(request, PRE_COOKIE) !== undefined;
}

function hmac(request: FastifyRequest, subject: string): string {
  return createHmac('sha256', request.server.dashboardKeys.csrf).update(subject).digest('base64url');
}

/** The token to put in this page's forms; sets the pre-session cookie when needed. */
export function csrfToken(request: FastifyRequest, reply: FastifyReply): string {
  if (request.dashboardUser) return hmac(request, `session:${request.dashboardUser.sessionId}`);
  let pre = readSigned(request, PRE_COOKIE);
  if (!pre) {
    pre = randomBytes(24).toString('base64url');
    reply.setCookie(PRE_COOKIE, pre, cookieOptions(reply.server));
    // Later calls in the same request must use the value just set.
    request.cookies[PRE_COOKIE] = reply.signCookie(pre);
  }
  return hmac(request, `pre:${pre}`);
}

/** True when the request's `_csrf` form field is the token for its session. */
export function csrfValid(request: FastifyRequest): boolean {
  const body = request.body as Record<string, unknown> | undefined;
  return csrfMatches(request, typeof body?._csrf === 'string' ? body._csrf : '');
}

/** True when `given` is the CSRF token for the request's session (an upload checks it before reading its body). */
export function csrfMatches(request: FastifyRequest, given: string): boolean {
  let subject: string | undefined;
  if (request.dashboardUser) subject = `session:${request.dashboardUser.sessionId}`;
  else {
    const pre = readSigned(request, PRE_COOKIE);
    if (pre) subject = `pre:${pre}`;
  }
  if (!subject || !given) return false;
  const expected = Buffer.from(hmac(request, subject));
  const got = Buffer.from(given);
  return got.length === expected.length && timingSafeEqual(got, expected);
}
