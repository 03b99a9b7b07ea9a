// Mail accounts: the list, create with a connection check, a check of a saved
// account, and disable / enable. Create goes through createMailAccount
// (mail/accounts.ts), the function POST /email/mail-accounts calls: the same
// schema, the same host and port rules (ALLOWED_PRIVATE_TARGETS), the same SMTP
// login check and the same messages. The password is never shown or echoed
// back into a form.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ErrorDetail } from '../lib/errors.ts';
import { parseAllowList } from '../lib/net-guard.ts';
import { createMailAccount, findMailAccount, getMailAccountPassword, listMailAccounts, type MailAccountRow } from '../mail/accounts.ts';
import { SmtpVerifyError, verifySmtpLogin } from '../mail/transport.ts';
import { numberField, queryField, rawField, signedIn, signedInPost, user, UUID_RE, validationDetails } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { setMailAccountStatus } from './updates.ts';
import { render } from './views.ts';

type IdParams = { Params: { id: string } };

const SECURITY = [
  { value: 'starttls', label: 'STARTTLS (port 587)' },
  { value: 'tls', label: 'TLS from the start (port 465)' },
  { value: 'none', label: 'None: plain text, never upgraded' },
];

const MESSAGES: Record<string, string> = {
  created: 'Mail account saved.',
  created_verified: 'Mail account saved: the server accepted the connection and the login.',
  disabled: 'Mail account disabled: nothing more is sent through it, mail queued for it is cancelled, and campaigns use their other accounts.',
  enabled: 'Mail account enabled.',
};

/** What the form shows back after a refusal: everything but the password. */
type Form = Record<string, string | boolean>;

function readForm(body: unknown): { input: Record<string, unknown>; form: Form } {
  const text = (name: string) => rawField(body, name) ?? '';
  const verify = text('verify') === 'on';
  const input: Record<string, unknown> = {
    host: text('host').trim(),
    port: numberField(body, 'port') ?? '',
    security: text('security'),
    from_email: text('from_email').trim(),
    verify,
  };
  // Optional fields: an empty input is an absent field, as in the API.
  for (const name of ['username', 'password', 'from_name'] as const) {
    const value = name === 'password' ? text(name) : text(name).trim();
    if (value !== '') input[name] = value;
  }
  for (const name of ['daily_limit', 'campaign_share_percent'] as const) {
    const value = numberField(body, name);
    if (value !== undefined) input[name] = value;
  }
  const form: Form = {
    host: text('host'),
    port: text('port'),
    security: text('security'),
    username: text('username'),
    from_email: text('from_email'),
    from_name: text('from_name'),
    daily_limit: text('daily_limit'),
    campaign_share_percent: text('campaign_share_percent'),
    verify,
  };
  return { input, form };
}

export async function mailAccountPages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;
  const allow = parseAllowList(config.allowedPrivateTargets);
  const guard = { allow, resolve: app.deps.resolveHost };

  async function findOwn(request: FastifyRequest<IdParams>): Promise<MailAccountRow> {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const row = await findMailAccount(db, user(request).teamId, request.params.id.toLowerCase());
    if (!row) throw pageNotFound();
    return row;
  }

  async function listPage(request: FastifyRequest, reply: FastifyReply, extra: Record<string, unknown> = {}, status = 200) {
    const { rows, total } = await listMailAccounts(db, user(request).teamId, { page: 1, perPage: 100 });
    return render(
      request,
      reply,
      'mail-accounts',
      { accounts: rows, total, message: MESSAGES[queryField(request.query, 'done', 20)], ...extra },
      status,
    );
  }

  const formPage = (request: FastifyRequest, reply: FastifyReply, form: Form, errors?: ErrorDetail[], status = 200) =>
    render(request, reply, 'mail-account-form', { form, errors, securities: SECURITY }, status);

  app.get('/mail-accounts', signedIn, async (request, reply) => listPage(request, reply));

  app.get('/mail-accounts/new', signedIn, async (request, reply) =>
    formPage(request, reply, {
      host: '', port: '587', security: 'starttls', username: '', from_email: '', from_name: '', daily_limit: '500', campaign_share_percent: '90', verify: true,
    }),
  );

  app.post('/mail-accounts', signedInPost, async (request, reply) => {
    const { input, form } = readForm(request.body);
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    try {
      await createMailAccount(db, config.appSecret, user(request).teamId, input, guard);
    } catch (err) {
      const details = validationDetails(err);
      if (!details) throw err;
      return formPage(request, reply, form, details, 422);
    }
    return reply.redirect(`/mail-accounts?done=${input.verify ? 'created_verified' : 'created'}`, 303);
  });

  // The connection check of a saved account, with its stored password: the same check as create's.
  app.post<IdParams>('/mail-accounts/:id/verify', signedInPost, async (request, reply) => {
    const account = await findOwn(request);
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    const password = await getMailAccountPassword(db, config.appSecret, user(request).teamId, account.id);
    try {
      await verifySmtpLogin(account, password, allow);
    } catch (err) {
      if (!(err instanceof SmtpVerifyError)) throw err;
      return listPage(request, reply, { checked: { id: account.id, ok: false, from_email: account.from_email, problem: err.message } }, 422);
    }
    return listPage(request, reply, { checked: { id: account.id, ok: true, from_email: account.from_email } });
  });

  for (const [action, status] of [['disable', 'disabled'], ['enable', 'active']] as const) {
    app.post<IdParams>(`/mail-accounts/:id/${action}`, signedInPost, async (request, reply) => {
      const account = await findOwn(request);
      if (!(await setMailAccountStatus(db, user(request).teamId, account.id, status))) throw pageNotFound();
      return reply.redirect(`/mail-accounts?done=${action}d`, 303);
    });
  }
}
