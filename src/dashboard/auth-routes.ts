// Sign-in, sign-out and one-time password links.
import type { FastifyInstance } from 'fastify';
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
  normalizeEmail,
  usePasswordLink,
} from './users.ts';
import { render } from './views.ts';

export async function authRoutes(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;
  // Per address and per client IP: guessing one account's password and
  // spraying one password over many accounts are both slowed to `max` a minute.
  const limit = { max: config.signInRateLimitPerMinute, timeWindow: 60_000 };
  const ipLimit = app.createRateLimit({ ...limit, keyGenerator: (request) => `signin-ip:${request.ip}` });
  const emailLimit = app.createRateLimit({
    ...limit,
    keyGenerator: (request) => `signin-email:${normalizeEmail(queryField(request.body, 'email', 320))}`,
  });

  app.get('/', async (request, reply) => reply.redirect(request.dashboardUser ? '/campaigns' : '/sign-in', 303));

  app.get('/sign-in', async (request, reply) => {
    if (request.dashboardUser) return reply.redirect('/campaigns', 303);
    return render(request, reply, 'sign-in', { next: localPath(queryField(request.query, 'next')) });
  });

  app.post('/sign-in', { preHandler: requireCsrf }, async (request, reply) => {
    const email = field(request.body, 'email', 320).trim();
    const password = field(request.body, 'password', MAX_PASSWORD);
    const next = localPath(field(request.body, 'next', 2000));
    for (const check of [ipLimit, emailLimit]) {
      const result = await check(request);
      if (!result.isAllowed && result.isExceeded) {
        reply.header('retry-after', String(result.ttlInSeconds));
        return render(request, reply, 'sign-in', { next, email, error: `Too many sign-in attempts. Try again in ${result.ttlInSeconds} seconds.` }, 429);
      }
    }
    const userId = email && password ? await checkCredentials(db, email, password) : null;
    if (!userId) {
      return render(request, reply, 'sign-in', { next, email, error: 'That e-mail and password do not match an account.' }, 401);
    }
    setSessionCookie(reply, await createSession(db, userId));
    return reply.redirect(next === '/' ? '/campaigns' : next, 303);
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
    return reply.redirect('/campaigns', 303);
  });
}
