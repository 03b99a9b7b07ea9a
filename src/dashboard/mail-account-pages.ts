// Mail accounts: the list, create and edit with a connection check, a check of
// a saved account, and disable / enable. Create goes through createMailAccount
// (mail/accounts.ts), the function POST /email/mail-accounts calls, edit and
// disable / enable through updateMailAccount (mail/accounts-manage.ts), that of
// PATCH /email/mail-accounts/{id}: the same schema, the same host and port
// rules (ALLOWED_PRIVATE_TARGETS), the same SMTP login check, the same messages. The password is never shown or echoed
// back into a form. The form also sets the account's IMAP mailbox (the API's `imap` field; an empty IMAP server
// removes it), each account links to its DKIM page, and delete (with a confirm step) goes through deleteMailAccount,
// as DELETE /email/mail-accounts/{id}: its 409 (campaigns still use the account) is shown on the confirm page.
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, type ErrorDetail } from '../lib/errors.ts';
import { imapSettingsByAccount } from '../inbound/imap/settings.ts';
import { parseAllowList } from '../lib/net-guard.ts';
import { createMailAccount, findMailAccount, getMailAccountPassword, listMailAccounts, type MailAccountRow } from '../mail/accounts.ts';
import { deleteMailAccount, updateMailAccount } from '../mail/accounts-manage.ts';
import { SmtpVerifyError, verifySmtpLogin } from '../mail/transport.ts';
import { numberField, queryField, rawField, signedIn, signedInPost, user, UUID_RE, validationDetails } from './forms.ts';
import { csvReply, periodOf, periodStats, statsPanel, wantsCsv } from './stats-view.ts';
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
  deleted: 'Mail account deleted: its queued messages were cancelled; the message log keeps what it sent.',
};

const IMAP_SECURITY = [
  { value: '', label: 'Automatic: TLS on port 993, else STARTTLS' },
  { value: 'tls', label: 'TLS from the start (port 993)' },
  { value: 'starttls', label: 'STARTTLS (port 143)' },
  { value: 'none', label: 'None: plain text (a private network only)' },
];

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
    imap_host: text('imap_host'),
    imap_port: text('imap_port'),
    imap_security: text('imap_security'),
    imap_user: text('imap_user'),
    imap_folder: text('imap_folder'),
  };
  // The IMAP mailbox: no server, no mailbox; an empty password keeps the saved one (on edit).
  if (text('imap_host').trim() !== '') {
    const imap: Record<string, unknown> = { host: text('imap_host').trim(), port: numberField(body, 'imap_port') ?? '', user: text('imap_user').trim() };
    if (text('imap_security') !== '') imap.security = text('imap_security');
    if (text('imap_password') !== '') imap.password = text('imap_password');
    if (text('imap_folder').trim() !== '') imap.folder = text('imap_folder').trim();
    input.imap = imap;
  }
  return { input, form };
}

const NO_IMAP = { imap_host: '', imap_port: '993', imap_security: '', imap_user: '', imap_folder: 'INBOX' };

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
    const imap = await imapSettingsByAccount(db, user(request).teamId, rows.map((r) => r.id));
    const health = await accountHealth(db, user(request).teamId, rows.map((r) => r.id));
    return render(
      request,
      reply,
      'mail-accounts',
      { accounts: rows.map((r) => ({ ...r, imap: imap.get(r.id) ?? null, health: health.get(r.id) ?? 'ok' })), total, message: MESSAGES[queryField(request.query, 'done', 20)], ...extra },
      status,
    );
  }

  const formPage = (request: FastifyRequest, reply: FastifyReply, form: Form, errors?: ErrorDetail[], status = 200, account?: MailAccountRow & { has_imap: boolean }) =>
    render(
      request,
      reply,
      'mail-account-form',
      { form, errors, securities: SECURITY, imapSecurities: IMAP_SECURITY, account, action: account ? `/mail-accounts/${account.id}/edit` : '/mail-accounts' },
      status,
    );

  function appSecret(): string {
    // main.ts always supplies one (APP_SECRET, or the embedded database's own).
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    return config.appSecret;
  }

  app.get('/mail-accounts', signedIn, async (request, reply) => listPage(request, reply));

  // One account's statistics and health (all its mail, campaign and transactional).
  app.get<IdParams>('/mail-accounts/:id/stats', signedIn, async (request, reply) => {
    const a = await findOwn(request);
    const teamId = user(request).teamId;
    const period = periodOf(request);
    const stats = await periodStats(db, teamId, { kind: 'account', id: a.id }, period);
    if (wantsCsv(request)) return csvReply(reply, stats, `mail-account-${a.id}-${period}`);
    const health = (await accountHealth(db, teamId, [a.id])).get(a.id) ?? 'ok';
    return render(request, reply, 'mail-account-stats', { account: a, health, panel: statsPanel(stats, period, `/mail-accounts/${a.id}/stats`) });
  });

  app.get('/mail-accounts/new', signedIn, async (request, reply) =>
    formPage(request, reply, {
      host: '', port: '587', security: 'starttls', username: '', from_email: '', from_name: '', daily_limit: '500', campaign_share_percent: '90', verify: true, ...NO_IMAP,
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
    const imap = (await imapSettingsByAccount(db, user(request).teamId, [a.id])).get(a.id);
    const form: Form = {
      host: a.host, port: String(a.port), security: a.security, username: a.username ?? '', from_email: a.from_email, from_name: a.from_name ?? '',
      daily_limit: String(a.daily_limit), campaign_share_percent: String(a.campaign_share_percent), verify: true,
      ...(imap
        ? { imap_host: imap.host, imap_port: String(imap.port), imap_security: imap.security, imap_user: imap.user, imap_folder: imap.folder }
        : NO_IMAP),
    };
    return formPage(request, reply, form, undefined, 200, { ...a, has_imap: imap !== undefined });
  });

  // The PATCH the API would get (updateMailAccount, as PATCH /email/mail-accounts/{id}): every field;
  // an emptied user name or sender name is removed; an empty password, daily limit or share keeps the saved one.
  app.post<IdParams>('/mail-accounts/:id/edit', signedInPost, async (request, reply) => {
    const account = await findOwn(request);
    const { input, form } = readForm(request.body);
    const hadImap = (await imapSettingsByAccount(db, user(request).teamId, [account.id])).has(account.id);
    const patch: Record<string, unknown> = {
      ...input,
      username: input.username ?? null,
      from_name: input.from_name ?? null,
      // An emptied IMAP server removes the mailbox.
      ...(input.imap === undefined && hadImap ? { imap: null } : {}),
    };
    try {
      await updateMailAccount(db, appSecret(), user(request).teamId, account.id, patch, guard);
    } catch (err) {
      const details = validationDetails(err);
      if (!details) throw err;
      return formPage(request, reply, form, details, 422, { ...account, has_imap: hadImap });
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

  const deletePage = (request: FastifyRequest, reply: FastifyReply, account: MailAccountRow, problem?: string, status = 200) =>
    render(request, reply, 'confirm', {
      title: `Delete the mail account ${account.from_email}?`,
      lead: 'Nothing is sent through it from then on, and its SMTP password (and IMAP mailbox) are erased. This cannot be undone.',
      items: [
        'messages queued for it and not yet being sent are cancelled; one being sent finishes',
        'the message log keeps the messages it sent',
        'a campaign that still uses it stops the delete: remove it from the campaign first',
      ],
      action: `/mail-accounts/${account.id}/delete`,
      button: 'Delete mail account',
      back: '/mail-accounts',
      back_label: 'Mail accounts',
      problem,
    }, status);

  app.get<IdParams>('/mail-accounts/:id/delete', signedIn, async (request, reply) => deletePage(request, reply, await findOwn(request)));

  app.post<IdParams>('/mail-accounts/:id/delete', signedInPost, async (request, reply) => {
    const account = await findOwn(request);
    try {
      await deleteMailAccount(db, user(request).teamId, account.id);
    } catch (err) {
      if (err instanceof AppError && err.code === 'NOT_FOUND') throw pageNotFound();
      if (err instanceof AppError && err.code === 'CONFLICT') return deletePage(request, reply, account, err.message, 409);
      throw err;
    }
    return reply.redirect('/mail-accounts?done=deleted', 303);
  });
}

/** The health state (stats/health.ts) of the team's accounts. */
async function accountHealth(db: Db, teamId: string, ids: string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const { rows } = await sql<{ id: string; health_state: string }>`
    SELECT id, health_state FROM mail_accounts WHERE team_id = ${teamId}::uuid AND id = ANY (${ids}::uuid[])`.execute(db);
  return new Map(rows.map((r) => [r.id, r.health_state]));
}
