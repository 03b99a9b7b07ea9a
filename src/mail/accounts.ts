// Mail accounts (docs/api.md, "Mail accounts"): a team's SMTP credentials. The password is
// sealed with SecretBox (AES-256-GCM, key from APP_SECRET) and leaves this module
// only through getMailAccountPassword, for the sending engine.
import { isIP } from 'node:net';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import { Type, type Static } from 'typebox';
import type { Db } from '../db/pool.ts';
import { detailsFromAjv, notFound, validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { DateTime } from '../http/schemas.ts';
import { SecretBox } from '../lib/secrets.ts';
import { checkHost, smtpPortRefusal, systemResolver, type AllowList, type Resolver } from '../lib/net-guard.ts';
import { verifySmtpLogin, type MailSecurity } from './transport.ts';
import { paginate } from '../lib/paginate.ts';
import { checkImapInput, ImapSettings, ImapSettingsBody, imapSettingsByAccount, writeImapSettings, type ImapValues } from '../inbound/imap/settings.ts';

// Mail that comes back (docs/decisions.md, "Mail that comes back"): both need the installation's INBOUND_DOMAIN.
const INBOUND_FIELDS = {
  verp: Type.Optional(
    Type.Boolean({
      default: false,
      description: 'Send with a signed per-message return path (MAIL FROM) under the inbound domain, so every bounce finds its message. ' +
        '`true` needs the installation\'s INBOUND_DOMAIN (422 otherwise). Some relays refuse or rewrite an envelope sender that is not the login\'s address.',
    }),
  ),
  capture_replies: Type.Optional(
    Type.Boolean({
      default: false,
      description: 'Set Reply-To to a signed per-message address under the inbound domain, so replies come back as `email.replied` events; ' +
        'it replaces any other Reply-To. Needs INBOUND_DOMAIN (422 otherwise).',
    }),
  ),
};

export const MailAccountBody = Type.Object(
  {
    host: Type.String({ minLength: 1, maxLength: 255, description: 'Hostname or IP address of the SMTP server.' }),
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
    security: Type.Enum(['tls', 'starttls', 'none'], {
      description: '`tls`: implicit TLS (port 465); `starttls`: STARTTLS required; `none`: plain, never upgraded.',
    }),
    username: Type.Optional(Type.String({ minLength: 1, maxLength: 320 })),
    password: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'Stored encrypted; never returned.' })),
    from_email: Type.String({ format: 'email', maxLength: 320 }),
    from_name: Type.Optional(Type.String({ maxLength: 255 })),
    daily_limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000, default: 500, description: 'E-mails per UTC day.' })),
    campaign_share_percent: Type.Optional(
      Type.Integer({
        minimum: 1, maximum: 100, default: 90,
        description: 'Share of `daily_limit` campaign mail may use; transactional mail may use all of it.',
      }),
    ),
    max_per_minute: Type.Optional(
      Type.Union([Type.Integer({ minimum: 1, maximum: 100_000 }), Type.Null()], {
        default: null,
        description: 'Messages per minute handed to the SMTP server (every kind of mail); null: no limit. Over it, a message waits, `queued`, for the next minute.',
      }),
    ),
    verify: Type.Optional(
      Type.Boolean({ default: false, description: 'Log in to the server before saving; a failed login is 422 and nothing is saved.' }),
    ),
    ...INBOUND_FIELDS,
    imap: Type.Optional(
      Type.Union([ImapSettingsBody, Type.Null()], {
        description: 'The mailbox where bounces, complaints and replies to this account arrive (polled over IMAP); `null` or absent: none.',
      }),
    ),
  },
  { additionalProperties: false },
);
export type MailAccountInput = Static<typeof MailAccountBody>;

export const MailAccount = Type.Object(
  {
    id: Type.String(),
    team_id: Type.String(),
    host: Type.String(),
    port: Type.Integer(),
    security: Type.Enum(['tls', 'starttls', 'none']),
    username: Type.Union([Type.String(), Type.Null()]),
    from_email: Type.String(),
    email: Type.String({ description: 'The same as `from_email` (what existing clients show in their account picker).' }),
    from_name: Type.Union([Type.String(), Type.Null()]),
    daily_limit: Type.Integer(),
    campaign_share_percent: Type.Integer(),
    max_per_minute: Type.Union([Type.Integer(), Type.Null()], { description: 'Messages per minute; null: no limit.' }),
    status: Type.Enum(['active', 'disabled']),
    verp: Type.Boolean(),
    capture_replies: Type.Boolean(),
    imap: Type.Union([ImapSettings, Type.Null()], { description: 'The IMAP mailbox polled for bounces (without its password); null when none.' }),
    created_at: DateTime,
    updated_at: DateTime,
  },
  { title: 'MailAccount' },
);

export type MailAccountRow = {
  id: string;
  team_id: string;
  host: string;
  port: number;
  security: MailSecurity;
  username: string | null;
  from_email: string;
  from_name: string | null;
  daily_limit: number;
  campaign_share_percent: number;
  max_per_minute: number | null;
  status: 'active' | 'disabled';
  verp: boolean;
  capture_replies: boolean;
  created_at: Date;
  updated_at: Date;
};

// Every column but password_enc: the ciphertext never leaves through a listing either.
export const PUBLIC_COLUMNS = [
  'id', 'team_id', 'host', 'port', 'security', 'username', 'from_email', 'from_name', 'daily_limit', 'campaign_share_percent', 'status', 'created_at', 'updated_at',
  'verp', 'capture_replies', 'max_per_minute',
] as const;

type ImapView = Awaited<ReturnType<typeof imapSettingsByAccount>> extends Map<string, infer V> ? V : never;

export function toMailAccount(row: MailAccountRow, imap: ImapView | null = null) {
  return { ...row, imap, email: row.from_email, created_at: row.created_at.toISOString(), updated_at: row.updated_at.toISOString() };
}

/** The API's mail-account objects, with their IMAP mailboxes read in one query. */
export async function mailAccountViews(db: Db, teamId: string, rows: MailAccountRow[]) {
  const imap = await imapSettingsByAccount(db, teamId, rows.map((r) => r.id));
  return rows.map((r) => toMailAccount(r, imap.get(r.id) ?? null));
}

// The same rules for every caller (API and CLI): the API's route schema has
// already applied them to a request body; the CLI's input arrives here unchecked.
const ajv = addFormats.default(new Ajv({ allErrors: true, strict: false, useDefaults: true, coerceTypes: false }));
const checkBody = ajv.compile(MailAccountBody);

export const HOSTNAME_RE = /^(?=.{1,253}\.?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;

/** Throws 422 VALIDATION_FAILED listing every problem; fills in the defaults. */
export function validateMailAccountInput(input: unknown): MailAccountInput {
  if (!checkBody(input)) throw validationFailed(detailsFromAjv(checkBody.errors ?? [], 'body'));
  const body = input as MailAccountInput;
  // PostgreSQL text cannot hold U+0000, and AUTH PLAIN uses it as the separator.
  const details: ErrorDetail[] = (['username', 'password', 'from_name'] as const)
    .filter((field) => body[field]?.includes('\u0000'))
    .map((field) => ({ field, message: 'must not contain NUL (U+0000) characters' }));
  if (isIP(body.host) === 0 && !HOSTNAME_RE.test(body.host)) {
    details.push({ field: 'host', message: 'must be a hostname or an IP address' });
  }
  if (body.from_name !== undefined && /[\r\n]/.test(body.from_name)) {
    details.push({ field: 'from_name', message: 'must be one line' });
  }
  if (body.password !== undefined && body.username === undefined) {
    details.push({ field: 'username', message: 'is required with a password' });
  }
  if (body.username !== undefined && body.password === undefined) {
    details.push({ field: 'password', message: 'is required with a username' });
  }
  if (details.length) throw validationFailed(details);
  return body;
}

const boxes = new Map<string, SecretBox>();
export function passwordBox(appSecret: string): SecretBox {
  let box = boxes.get(appSecret);
  if (!box) {
    box = new SecretBox(appSecret, 'mail-account-password');
    boxes.set(appSecret, box);
  }
  return box;
}

/** `verp` and `capture_replies` need addresses under INBOUND_DOMAIN: without it they are 422. */
export function inboundFieldProblems(body: { verp?: boolean; capture_replies?: boolean }, domain: string | undefined): ErrorDetail[] {
  if (domain) return [];
  return (['verp', 'capture_replies'] as const)
    .filter((f) => body[f] === true)
    .map((field) => ({ field, message: 'needs the installation\'s inbound domain (INBOUND_DOMAIN), which is not set' }));
}

/** The operator's private-target allow-list and the resolver used to check a host before it is saved. */
export type HostGuard = { allow: AllowList; resolve?: Resolver };

/**
 * The address rules of webhooks (src/lib/net-guard.ts) for an SMTP host: an IP
 * literal or a name resolving to a non-public address is refused unless
 * ALLOWED_PRIVATE_TARGETS lists it, and a public host may only use the SMTP
 * ports. A name that does not resolve yet is accepted (docs/decisions.md):
 * every connection is checked again, so it can never reach a private address.
 */
export async function hostProblems(account: { host: string; port: number }, guard: HostGuard): Promise<ErrorDetail[]> {
  const check = await checkHost(account.host, guard.allow, guard.resolve ?? systemResolver);
  if (!check.ok) return [{ field: 'host', message: check.problem }];
  const port = smtpPortRefusal(guard.allow, account.host, account.port, check.addresses);
  return port ? [{ field: 'port', message: port }] : [];
}

/**
 * Validates, checks the host against the address rules, optionally checks the
 * SMTP login (before anything is written), and saves the account with its
 * password sealed. Throws 422 on invalid input, a refused host or a failed login.
 */
export async function createMailAccount(
  db: Db, appSecret: string, teamId: string, input: unknown, guard: HostGuard, inbound: { domain?: string } = {},
): Promise<MailAccountRow> {
  const body = validateMailAccountInput(input);
  const inboundProblems = inboundFieldProblems(body, inbound.domain);
  if (inboundProblems.length) throw validationFailed(inboundProblems);
  const host = body.host.toLowerCase().replace(/\.$/, '');
  const account = { host, port: body.port, security: body.security, username: body.username ?? null };
  const password = body.password ?? null;
  const problems = await hostProblems(account, guard);
  if (problems.length) throw validationFailed(problems, 'the SMTP host is not allowed');
  const imap: ImapValues | null = body.imap ? await checkImapInput(appSecret, body.imap, guard) : null;
  if (body.verify) {
    try {
      await verifySmtpLogin(account, password, guard.allow);
    } catch (err) {
      // A fixed message of ours: the server's banner or error text is never passed on,
      // so verify cannot be used to read what answers on a host and port.
      throw validationFailed(
        [{ field: 'verify', message: `SMTP login check failed: ${(err as Error).message}` }],
        'the SMTP server did not accept the connection or the login',
      );
    }
  }
  return db.transaction().execute(async (trx) => {
  const row = await trx
    .insertInto('mail_accounts')
    .values({
      team_id: teamId,
      ...account,
      password_enc: password === null ? null : passwordBox(appSecret).seal(password),
      from_email: body.from_email.toLowerCase(),
      from_name: body.from_name ?? null,
      daily_limit: body.daily_limit ?? 500,
      campaign_share_percent: body.campaign_share_percent ?? 90,
      max_per_minute: body.max_per_minute ?? null,
      verp: body.verp ?? false,
      capture_replies: body.capture_replies ?? false,
    })
    .returning(PUBLIC_COLUMNS)
    .executeTakeFirstOrThrow();
  if (imap) await writeImapSettings(trx, teamId, row.id, imap);
  return row;
  });
}

export async function findMailAccount(db: Db, teamId: string, id: string): Promise<MailAccountRow | undefined> {
  return db
    .selectFrom('mail_accounts')
    .select(PUBLIC_COLUMNS)
    .where('team_id', '=', teamId)
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
}

export async function listMailAccounts(
  db: Db,
  teamId: string,
  opts: { page: number; perPage: number },
): Promise<{ rows: MailAccountRow[]; total: number }> {
  const base = db.selectFrom('mail_accounts').where('team_id', '=', teamId).where('deleted_at', 'is', null);
  return paginate(
    opts,
    async () => (await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n,
    (limit, offset) => base.select(PUBLIC_COLUMNS).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset).execute(),
  );
}

/** The clear password of a team's account (null when it has none), for the sending engine. Throws 404 for an unknown account. */
export async function getMailAccountPassword(db: Db, appSecret: string, teamId: string, accountId: string): Promise<string | null> {
  const row = await db
    .selectFrom('mail_accounts')
    .select('password_enc')
    .where('team_id', '=', teamId)
    .where('id', '=', accountId)
    .executeTakeFirst();
  if (!row) throw notFound('mail account');
  return row.password_enc ? passwordBox(appSecret).open(row.password_enc) : null;
}
