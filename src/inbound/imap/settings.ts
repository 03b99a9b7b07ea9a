// The IMAP mailbox of a mail account: where bounces (DSNs), complaints (ARF)
// and replies land when the account's return path and Reply-To are its own
// address (no inbound listener, or a relay that rewrites the envelope
// sender). The periodic imap_poll job reads it (imap/poll.ts). The password
// is sealed (AES-GCM under APP_SECRET) and never returned; the host follows
// the address rules of SMTP hosts (public, or listed in ALLOWED_PRIVATE_TARGETS;
// a public host only on the IMAP ports 143 and 993).
import { isIP } from 'node:net';
import { Type, type Static } from 'typebox';
import type { Db } from '../../db/pool.ts';
import { DateTime } from '../../http/schemas.ts';
import { notFound, validationFailed, type ErrorDetail } from '../../lib/errors.ts';
import { ALLOW_SETTING, checkHost, isAllowedHost, systemResolver, type AllowList, type Resolver } from '../../lib/net-guard.ts';
import { SecretBox } from '../../lib/secrets.ts';

export const IMAP_PUBLIC_PORTS = [143, 993];

export const ImapSettingsBody = Type.Object(
  {
    host: Type.String({ minLength: 1, maxLength: 255, description: 'Hostname or IP address of the IMAP server.' }),
    port: Type.Integer({ minimum: 1, maximum: 65535, description: '993 (implicit TLS) or 143 (STARTTLS) on a public host.' }),
    security: Type.Optional(
      Type.Enum(['tls', 'starttls', 'none'], {
        description: '`tls`: implicit TLS; `starttls`: STARTTLS required; `none`: plain (only sensible on a private network). Default: `tls` on port 993, else `starttls`.',
      }),
    ),
    user: Type.String({ minLength: 1, maxLength: 320 }),
    password: Type.String({ minLength: 1, maxLength: 1024, description: 'Stored encrypted; never returned.' }),
    folder: Type.Optional(Type.String({ minLength: 1, maxLength: 255, default: 'INBOX', description: 'The mailbox to read (default INBOX).' })),
  },
  { additionalProperties: false },
);
export type ImapSettingsInput = Static<typeof ImapSettingsBody>;

export const ImapSettings = Type.Object(
  {
    host: Type.String(),
    port: Type.Integer(),
    security: Type.Enum(['tls', 'starttls', 'none']),
    user: Type.String(),
    folder: Type.String(),
    last_polled_at: Type.Union([DateTime, Type.Null()], { description: 'The last poll that read the mailbox without an error.' }),
    last_error: Type.Union([Type.String(), Type.Null()], { description: 'Why the last poll failed (cleared by the next good one).' }),
    next_poll_at: DateTime,
    messages_processed: Type.Integer(),
  },
  { title: 'ImapSettings' },
);

type Row = {
  host: string;
  port: number;
  security: 'tls' | 'starttls' | 'none';
  username: string;
  folder: string;
  last_polled_at: Date | null;
  last_error: string | null;
  next_poll_at: Date;
  messages_processed: number;
};
const COLUMNS = ['host', 'port', 'security', 'username', 'folder', 'last_polled_at', 'last_error', 'next_poll_at', 'messages_processed'] as const;

export function toImapSettings(row: Row) {
  return {
    host: row.host,
    port: row.port,
    security: row.security,
    user: row.username,
    folder: row.folder,
    last_polled_at: row.last_polled_at?.toISOString() ?? null,
    last_error: row.last_error,
    next_poll_at: row.next_poll_at.toISOString(),
    messages_processed: row.messages_processed,
  };
}

const boxes = new Map<string, SecretBox>();
export function imapPasswordBox(appSecret: string): SecretBox {
  let box = boxes.get(appSecret);
  if (!box) {
    box = new SecretBox(appSecret, 'imap-password');
    boxes.set(appSecret, box);
  }
  return box;
}

const HOSTNAME_RE = /^(?=.{1,253}\.?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;

/** Refusal of a port on a host: public hosts only on the IMAP ports; an allowed private host on any. */
export function imapPortRefusal(allow: AllowList, host: string, port: number, addresses: string[]): string | null {
  if (IMAP_PUBLIC_PORTS.includes(port)) return null;
  if (isAllowedHost(allow, host) || (addresses.length > 0 && addresses.every((a) => isAllowedHost(allow, a)))) return null;
  return `port ${port} is not an IMAP port (${IMAP_PUBLIC_PORTS.join(', ')}); other ports only for hosts allowed by ${ALLOW_SETTING}`;
}

/** Checks the host as every connection will (the poll checks again before it connects). */
export async function imapHostProblems(
  host: string,
  port: number,
  allow: AllowList,
  resolve: Resolver = systemResolver,
): Promise<ErrorDetail[]> {
  if (isIP(host) === 0 && !HOSTNAME_RE.test(host)) return [{ field: 'imap.host', message: 'must be a hostname or an IP address' }];
  const check = await checkHost(host, allow, resolve);
  if (!check.ok) return [{ field: 'imap.host', message: check.problem }];
  const port_ = imapPortRefusal(allow, host, port, check.addresses);
  return port_ ? [{ field: 'imap.port', message: port_ }] : [];
}

/** An `imap` object of a mail-account update: the password may be left out to keep the stored one. */
export const ImapSettingsPatch = Type.Object(
  {
    ...ImapSettingsBody.properties,
    password: Type.Optional(
      Type.String({ minLength: 1, maxLength: 1024, description: 'Stored encrypted; never returned. Leave it out to keep the stored password.' }),
    ),
  },
  { additionalProperties: false },
);
export type ImapSettingsPatchInput = Static<typeof ImapSettingsPatch>;

/** What a checked `imap` object writes (the password sealed, or null: keep the stored one). */
export type ImapValues = {
  host: string;
  port: number;
  security: 'tls' | 'starttls' | 'none';
  username: string;
  password_enc: Buffer | null;
  folder: string;
};

/**
 * Checks an `imap` object (shape checked by the caller) as every poll will:
 * no NUL, CR or LF in user, password and folder; the host by the address rules
 * (public, or listed in ALLOWED_PRIVATE_TARGETS; public hosts only on 143 and
 * 993). Throws 422 naming `imap.<field>`. Writes nothing.
 */
export async function checkImapInput(
  appSecret: string,
  body: ImapSettingsPatchInput,
  guard: { allow: AllowList; resolve?: Resolver },
  hasStoredPassword = false,
): Promise<ImapValues> {
  const host = body.host.toLowerCase().replace(/\.$/, '');
  const details: ErrorDetail[] = (['user', 'password', 'folder'] as const)
    .filter((f) => ['\u0000', '\r', '\n'].some((c) => (body[f] ?? '').includes(c)))
    .map((f) => ({ field: `imap.${f}`, message: 'must not contain NUL, CR or LF characters' }));
  if (body.password === undefined && !hasStoredPassword) details.push({ field: 'imap.password', message: 'is required (no password is stored yet)' });
  if (details.length) throw validationFailed(details);
  const problems = await imapHostProblems(host, body.port, guard.allow, guard.resolve);
  if (problems.length) throw validationFailed(problems, 'the IMAP host is not allowed');
  return {
    host,
    port: body.port,
    security: body.security ?? (body.port === 993 ? 'tls' : 'starttls'),
    username: body.user,
    password_enc: body.password === undefined ? null : imapPasswordBox(appSecret).seal(body.password),
    folder: body.folder ?? 'INBOX',
  };
}

/** Sets or replaces the mailbox of an account (in the caller's transaction); polling starts again at once. */
export async function writeImapSettings(db: Db, teamId: string, accountId: string, checked: ImapValues): Promise<Row> {
  const { password_enc, ...rest } = checked;
  const values = password_enc === null ? rest : { ...rest, password_enc };
  if (password_enc === null) {
    // Keeps the stored password: an update of an existing row only.
    return db
      .updateTable('mail_account_imap')
      .set({ ...values, next_poll_at: new Date(), failures: 0, last_error: null, updated_at: new Date() })
      .where('team_id', '=', teamId)
      .where('mail_account_id', '=', accountId)
      .returning(COLUMNS)
      .executeTakeFirstOrThrow();
  }
  return db
    .insertInto('mail_account_imap')
    .values({ mail_account_id: accountId, team_id: teamId, ...rest, password_enc, next_poll_at: new Date() })
    .onConflict((oc) => oc.column('mail_account_id').doUpdateSet({ ...values, next_poll_at: new Date(), failures: 0, last_error: null, updated_at: new Date() }))
    .returning(COLUMNS)
    .executeTakeFirstOrThrow();
}

/** Validates (shape checked by the route), checks the host, then one upsert. 404 for another team's account. */
export async function saveImapSettings(
  db: Db,
  appSecret: string,
  teamId: string,
  accountId: string,
  body: ImapSettingsInput,
  guard: { allow: AllowList; resolve?: Resolver },
): Promise<Row> {
  const account = await db
    .selectFrom('mail_accounts').select('id')
    .where('team_id', '=', teamId).where('id', '=', accountId).where('deleted_at', 'is', null)
    .executeTakeFirst();
  if (!account) throw notFound('mail account');
  const checked = await checkImapInput(appSecret, body, guard);
  return writeImapSettings(db, teamId, accountId, checked);
}

/** The mailboxes of some accounts of a team, in one query (for the mail-account object's `imap`). */
export async function imapSettingsByAccount(db: Db, teamId: string, accountIds: string[]): Promise<Map<string, ReturnType<typeof toImapSettings>>> {
  if (accountIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('mail_account_imap')
    .select(['mail_account_id', ...COLUMNS])
    .where('team_id', '=', teamId)
    .where('mail_account_id', 'in', accountIds)
    .execute();
  return new Map(rows.map((r) => [r.mail_account_id, toImapSettings(r)]));
}


export async function findImapSettings(db: Db, teamId: string, accountId: string): Promise<Row | undefined> {
  return db.selectFrom('mail_account_imap').select(COLUMNS).where('team_id', '=', teamId).where('mail_account_id', '=', accountId).executeTakeFirst();
}

export async function deleteImapSettings(db: Db, teamId: string, accountId: string): Promise<boolean> {
  const res = await db.deleteFrom('mail_account_imap').where('team_id', '=', teamId).where('mail_account_id', '=', accountId).executeTakeFirst();
  return res.numDeletedRows > 0n;
}
