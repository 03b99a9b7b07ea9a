// Sign-in, sign-out and one-time password links.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { leaveBodyUnread } from '../http/unread-body.ts';
import { isEmail } from '../http/schemas.ts';
import { field, localPath, queryField, requireCsrf, requireUser } from './forms.ts';
import { clearSessionCookie, setSessionCookie } from './security.ts';
import {
  checkCredentials,
  createSession,
  deleteSession,
  findPasswordToken,
  MAX_PASSWORD,
  MIN_PASSWORD,
  usePasswordLink,
} from './users.ts';
import { render } from './views.ts';
import { normalizeEmail } from '../lib/text.ts';

export async function authRoutes(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;
  // Per (address, client IP) and per client IP, never per address alone: a
  // per-address budget let anyone lock a user out by failing on purpose. One
  // guesser is slowed to `max` a minute per address and `ipMax` over all
  // addresses; the owner signing in from elsewhere is never held up by it.
  const max = config.signInRateLimitPerMinute;
  const ipMax = config.intake.signInIpRateLimitPerMinute ?? 3 * max;
  const ipLimit = app.createRateLimit({ max: ipMax, timeWindow: 60_000, keyGenerator: (request) => `signin-ip:${request.ip}` });
  const pairLimit = app.createRateLimit({
    max,
    timeWindow: 60_000,
    keyGenerator: (request) => `signin-email-ip:${normalizeEmail(queryField(request.body, 'email', 320))}:${request.ip}`,
  });
  const tooMany = (seconds: number, data: Record<string, unknown>, request: FastifyRequest, reply: FastifyReply) => {
    reply.header('retry-after', String(seconds));
    return render(request, reply, 'sign-in', { ...data, error: `Too many sign-in attempts. Try again in ${seconds} seconds.` }, 429);
  };
  // Before the body is read: a client over its IP budget gets no form parsed.
  const ipCheck = async (request: FastifyRequest, reply: FastifyReply) => {
    const result = await ipLimit(request);
    if (!result.isAllowed && result.isExceeded) {
      leaveBodyUnread(request, reply);
      return tooMany(result.ttlInSeconds, { next: '/' }, request, reply);
    }
  };

  app.get('/sign-in', async (request, reply) => {
    if (request.dashboardUser) return reply.redirect('/', 303);
    return render(request, reply, 'sign-in', { next: localPath(queryField(request.query, 'next')) });
  });

  app.post('/sign-in', { preParsing: ipCheck, preHandler: requireCsrf }, async (request, reply) => {
    const email = field(request.body, 'email', 320).trim();
    const password = field(request.body, 'password', MAX_PASSWORD);
    const next = localPath(field(request.body, 'next', 2000));
    const result = await pairLimit(request);
    if (!result.isAllowed && result.isExceeded) return tooMany(result.ttlInSeconds, { next, email }, request, reply);
    const userId = email && password ? await checkCredentials(db, email, password) : null;
    if (!userId) {
      return render(request, reply, 'sign-in', { next, email, error: 'That e-mail and password do not match an account.' }, 401);
    }
    setSessionCookie(reply, await createSession(db, userId));
    return reply.redirect(next, 303);
  });

  app.post('/sign-out', { preHandler: [requireUser, requireCsrf] }, async (request, reply) => {
    await deleteSession(db, request.dashboardUser!.sessionId);
    clearSessionCookie(reply);
    return reply.redirect('/sign-in', 303);
  });

  app.get('/set-password', async (request, reply) => {
    const token = queryField(request.query, 'token', 200);
    const link = token ? await findPasswordToken(db, token) : undefined;
    if (!link) return render(request, reply, 'set-password', { invalid: true }, 404);
    return render(request, reply, 'set-password', { token, email: link.email, needsEmail: link.userId === null });
  });

  app.post('/set-password', { preHandler: requireCsrf }, async (request, reply) => {
    const token = field(request.body, 'token', 200);
    const password = field(request.body, 'password', MAX_PASSWORD);
    const confirm = field(request.body, 'confirm', MAX_PASSWORD);
    const link = token ? await findPasswordToken(db, token) : undefined;
    if (!link) return render(request, reply, 'set-password', { invalid: true }, 404);
    const needsEmail = link.userId === null;
    const email = needsEmail ? normalizeEmail(field(request.body, 'email', 320)) : link.email;
    const again = (error: string) => render(request, reply, 'set-password', { token, email, needsEmail, error }, 422);
    if (needsEmail && !isEmail(email ?? '')) return again('Enter a valid e-mail address.');
    if (password.length < MIN_PASSWORD) return again(`The password must have at least ${MIN_PASSWORD} characters.`);
    if (password !== confirm) return again('The two passwords differ.');
    const result = await usePasswordLink(db, token, email, password);
    if (result.kind === 'email_taken') return again('That e-mail address already has an account.');
    if (result.kind === 'invalid') return render(request, reply, 'set-password', { invalid: true }, 404);
    setSessionCookie(reply, await createSession(db, result.userId));
    return reply.redirect('/', 303);
  });
}
