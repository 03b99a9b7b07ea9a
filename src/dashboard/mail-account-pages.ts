// Mail accounts: the list, create and edit with a connection check, a check of
// a saved account, and disable / enable. Create goes through createMailAccount
// (mail/accounts.ts), the function POST /email/mail-accounts calls, edit and
// disable / enable through updateMailAccount (mail/accounts-manage.ts), that of
// PATCH /email/mail-accounts/{id}: the same schema, the same host and port
// rules (ALLOWED_PRIVATE_TARGETS), the same SMTP login check, the same messages. The password is never shown or echoed
// back into a form.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ErrorDetail } from '../lib/errors.ts';
import { parseAllowList } from '../lib/net-guard.ts';
import { createMailAccount, findMailAccount, getMailAccountPassword, listMailAccounts, type MailAccountRow } from '../mail/accounts.ts';
import { updateMailAccount } from '../mail/accounts-manage.ts';
import { SmtpVerifyError, verifySmtpLogin } from '../mail/transport.ts';
import { numberField, queryField, rawField, signedIn, signedInPost, user, UUID_RE, validationDetails } from './forms.ts';
import { pageNotFound } from './page-error.ts';
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
  saved: 'Mail account saved: the next message goes out with these settings.',
  saved_verified: 'Mail account saved: the server accepted the connection and the login.',
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

  const formPage = (request: FastifyRequest, reply: FastifyReply, form: Form, errors?: ErrorDetail[], status = 200, account?: MailAccountRow) =>
    render(
      request,
      reply,
      'mail-account-form',
      { form, errors, securities: SECURITY, account, action: account ? `/mail-accounts/${account.id}/edit` : '/mail-accounts' },
      status,
    );

  function appSecret(): string {
    // main.ts always supplies one (APP_SECRET, or the embedded database's own).
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    return config.appSecret;
  }

  app.get('/mail-accounts', signedIn, async (request, reply) => listPage(request, reply));

  app.get('/mail-accounts/new', signedIn, async (request, reply) =>
    formPage(request, reply, {
      host: '', port: '587', security: 'starttls', username: '', from_email: '', from_name: '', daily_limit: '500', campaign_share_percent: '90', verify: true,
    }),
  );

  app.post('/mail-accounts', signedInPost, async (request, reply) => {
    const { input, form } = readForm(request.body);
    try {
      await createMailAccount(db, appSecret(), user(request).teamId, input, guard);
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
    const password = await getMailAccountPassword(db, appSecret(), user(request).teamId, account.id);
    try {
      await verifySmtpLogin(account, password, allow);
    } catch (err) {
      if (!(err instanceof SmtpVerifyError)) throw err;
      return listPage(request, reply, { checked: { id: account.id, ok: false, from_email: account.from_email, problem: err.message } }, 422);
    }
    return listPage(request, reply, { checked: { id: account.id, ok: true, from_email: account.from_email } });
  });

  app.get<IdParams>('/mail-accounts/:id/edit', signedIn, async (request, reply) => {
    const a = await findOwn(request);
    const form: Form = {
      host: a.host, port: String(a.port), security: a.security, username: a.username ?? '', from_email: a.from_email, from_name: a.from_name ?? '',
      daily_limit: String(a.daily_limit), campaign_share_percent: String(a.campaign_share_percent), verify: true,
    };
    return formPage(request, reply, form, undefined, 200, a);
  });

  // The PATCH the API would get (updateMailAccount, as PATCH /email/mail-accounts/{id}): every field;
  // an emptied user name or sender name is removed; an empty password, daily limit or share keeps the saved one.
  app.post<IdParams>('/mail-accounts/:id/edit', signedInPost, async (request, reply) => {
    const account = await findOwn(request);
    const { input, form } = readForm(request.body);
    const patch: Record<string, unknown> = {
      ...input,
      username: input.username ?? null,
      from_name: input.from_name ?? null,
    };
    try {
      await updateMailAccount(db, appSecret(), user(request).teamId, account.id, patch, guard);
    } catch (err) {
      const details = validationDetails(err);
      if (!details) throw err;
      return formPage(request, reply, form, details, 422, account);
    }
    return reply.redirect(`/mail-accounts?done=${input.verify ? 'saved_verified' : 'saved'}`, 303);
  });

  for (const [action, status] of [['disable', 'disabled'], ['enable', 'active']] as const) {
    app.post<IdParams>(`/mail-accounts/:id/${action}`, signedInPost, async (request, reply) => {
      const account = await findOwn(request);
      // Through the API's update: the sending engine also drops its pooled connection to the account.
      await updateMailAccount(db, appSecret(), user(request).teamId, account.id, { status }, guard);
      return reply.redirect(`/mail-accounts?done=${action}d`, 303);
    });
  }
}
