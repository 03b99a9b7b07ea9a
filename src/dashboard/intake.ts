// The dashboard reads no form before it knows the request may be answered: a
// POST without a session is answered from its headers (a redirect to sign-in),
// and the two forms that work signed out (sign-in, set-password) need the
// pre-session cookie their page set, without which their CSRF check fails
// anyway. A stranger's 10 MB POST is never read, let alone parsed.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { leaveBodyUnread } from '../http/unread-body.ts';
import { PageError } from './page-error.ts';
import { hasPreSession } from './security.ts';

const SIGNED_OUT_FORMS = new Set(['/sign-in', '/set-password']);

export const EXPIRED_FORM = 'This form has expired or did not come from this site. Go back, reload the page and try again.';

/** preParsing, after loadSession (onRequest). */
export async function refuseBeforeBody(request: FastifyRequest, reply: FastifyReply) {
  if (request.method === 'GET' || request.method === 'HEAD' || request.dashboardUser) return;
  if (SIGNED_OUT_FORMS.has(request.routeOptions.url ?? '')) {
    if (hasPreSession(request)) return;
    leaveBodyUnread(request, reply);
    throw new PageError(403, EXPIRED_FORM);
  }
  leaveBodyUnread(request, reply);
  return reply.redirect('/sign-in', 303);
}
