// Update and delete of mail accounts, for the API and the dashboard alike.
// Errors are the domain errors of lib/errors.ts (404, 409, 422): each caller
// maps them to its own answer.
import { isIP } from 'node:net';
import { sql } from 'kysely';
import { Type, type Static } from 'typebox';
import type { Db } from '../db/pool.ts';
import { AppError, notFound, validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { bodyChecker } from '../http/schemas.ts';
import { hostProblems, HOSTNAME_RE, inboundFieldProblems, passwordBox, PUBLIC_COLUMNS, type HostGuard, type MailAccountRow } from './accounts.ts';
import { forgetTransport } from './send.ts';
import { checkImapInput, ImapSettingsPatch, writeImapSettings, type ImapValues } from '../inbound/imap/settings.ts';
import { verifySmtpLogin } from './transport.ts';

const nullable = (schema: Record<string, unknown>, description: string) =>
  Type.Unsafe<string | null>({ ...schema, type: ['string', 'null'], description });

/** PATCH: any field of create (at least one) and `status`; what is absent stays as it is. */
export const UpdateMailAccountBody = Type.Object(
  {
    host: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'Hostname or IP address of the SMTP server.' })),
    port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    security: Type.Optional(Type.Enum(['tls', 'starttls', 'none'])),
    username: Type.Optional(nullable({ minLength: 1, maxLength: 320 }, '`null` removes the login (and the password).')),
    password: Type.Optional(
      nullable({ minLength: 1, maxLength: 1024 }, 'Write-only: stored encrypted, never returned. `null` only together with `username: null`.'),
    ),
    from_email: Type.Optional(Type.String({ format: 'email', maxLength: 320 })),
    from_name: Type.Optional(nullable({ maxLength: 255 }, '`null` removes the display name.')),
    daily_limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000, description: 'E-mails per UTC day.' })),
    campaign_share_percent: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 100, description: 'Share of `daily_limit` campaign mail may use.' }),
    ),
    max_per_minute: Type.Optional(
      Type.Union([Type.Integer({ minimum: 1, maximum: 100_000 }), Type.Null()], { description: 'Messages per minute; `null` removes the limit.' }),
    ),
    status: Type.Optional(
      Type.Enum(['active', 'disabled'], {
        description: '`disabled`: nothing is sent through the account (its queued messages are cancelled when they come up).',
      }),
    ),
    verify: Type.Optional(
      Type.Boolean({ description: 'Log in with the updated settings before saving; a failed login is 422 and nothing is saved.' }),
    ),
    verp: Type.Optional(Type.Boolean({ description: 'As at create: a signed per-message return path. `true` needs INBOUND_DOMAIN (422 otherwise).' })),
    capture_replies: Type.Optional(Type.Boolean({ description: 'As at create: a signed per-message Reply-To. `true` needs INBOUND_DOMAIN (422 otherwise).' })),
    imap: Type.Optional(
      Type.Union([ImapSettingsPatch, Type.Null()], {
        description: 'Sets or replaces the IMAP mailbox (without `password` the stored one stays); `null` removes it.',
      }),
    ),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type MailAccountPatch = Static<typeof UpdateMailAccountBody>;

const checkPatch = bodyChecker(UpdateMailAccountBody);

type StoredAccount = MailAccountRow & { password_enc: Buffer | null };

async function readAccount(db: Db, teamId: string, id: string): Promise<StoredAccount | undefined> {
  return db
    .selectFrom('mail_accounts')
    .select([...PUBLIC_COLUMNS, 'password_enc'])
    .where('team_id', '=', teamId)
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
}

/**
 * Updates a mail account of the team with the rules of create: the host
 * (when host or port change) must pass the address rules and
 * ALLOWED_PRIVATE_TARGETS, a login needs a username and a password, and with
 * `verify` the SMTP login is checked with the resulting settings (the stored
 * password when none is given) before anything is written. A new password is
 * sealed again; the password never comes back. The sending engine rebuilds
 * its pooled connection to the account (keyed by `updated_at`) for the next
 * message. Throws 404 (unknown, deleted or another team's) or 422.
 */
export async function updateMailAccount(
  db: Db,
  appSecret: string,
  teamId: string,
  id: string,
  input: unknown,
  guard: HostGuard,
  inbound: { domain?: string } = {},
): Promise<MailAccountRow> {
  const patch = checkPatch(input);
  const current = await readAccount(db, teamId, id);
  if (!current) throw notFound('mail account');

  const details: ErrorDetail[] = (['username', 'password', 'from_name'] as const)
    .filter((field) => patch[field]?.includes('\u0000'))
    .map((field) => ({ field, message: 'must not contain NUL (U+0000) characters' }));
  if (patch.host !== undefined && isIP(patch.host) === 0 && !HOSTNAME_RE.test(patch.host)) {
    details.push({ field: 'host', message: 'must be a hostname or an IP address' });
  }
  if (patch.from_name != null && /[\r\n]/.test(patch.from_name)) details.push({ field: 'from_name', message: 'must be one line' });
  details.push(...inboundFieldProblems(patch, inbound.domain));

  const username = patch.username === undefined ? current.username : patch.username;
  // The stored password stays unless the login is removed or a new one is given.
  const keepsPassword = patch.password === undefined && patch.username !== null;
  const hasPassword = patch.password != null || (keepsPassword && current.password_enc !== null);
  if (patch.password != null && username === null) details.push({ field: 'username', message: 'is required with a password' });
  if (patch.password === null && patch.username !== null) details.push({ field: 'password', message: 'can be removed only with username: null' });
  if (username !== null && !hasPassword) details.push({ field: 'password', message: 'is required with a username' });
  if (details.length) throw validationFailed(details);

  const host = patch.host === undefined ? current.host : patch.host.toLowerCase().replace(/\.$/, '');
  const account = { host, port: patch.port ?? current.port, security: patch.security ?? current.security, username };
  if (patch.host !== undefined || patch.port !== undefined) {
    const problems = await hostProblems(account, guard);
    if (problems.length) throw validationFailed(problems, 'the SMTP host is not allowed');
  }
  let imap: ImapValues | null = null;
  if (patch.imap) {
    const stored = await db.selectFrom('mail_account_imap').select('mail_account_id').where('team_id', '=', teamId).where('mail_account_id', '=', id).executeTakeFirst();
    imap = await checkImapInput(appSecret, patch.imap, guard, stored !== undefined);
  }
  const box = passwordBox(appSecret);
  const password = patch.password != null ? patch.password : keepsPassword && current.password_enc ? box.open(current.password_enc) : null;
  if (patch.verify) {
    try {
      await verifySmtpLogin(account, username === null ? null : password, guard.allow);
    } catch (err) {
      // A fixed message of ours, as at create: never the server's own text.
      throw validationFailed(
        [{ field: 'verify', message: `SMTP login check failed: ${(err as Error).message}` }],
        'the SMTP server did not accept the connection or the login',
      );
    }
  }

  const row = await db.transaction().execute(async (trx) => {
    const locked = await trx
      .selectFrom('mail_accounts')
      .select('id')
      .where('team_id', '=', teamId)
      .where('id', '=', id)
      .where('deleted_at', 'is', null)
      .forUpdate()
      .executeTakeFirst();
    if (!locked) throw notFound('mail account');
    if (imap) {
      // The mailbox may have been removed since the check: without a password there is nothing to keep.
      if (imap.password_enc === null) {
        const still = await trx.selectFrom('mail_account_imap').select('mail_account_id').where('team_id', '=', teamId).where('mail_account_id', '=', id).executeTakeFirst();
        if (!still) throw validationFailed([{ field: 'imap.password', message: 'is required (no password is stored yet)' }]);
      }
      await writeImapSettings(trx, teamId, id, imap);
    } else if (patch.imap === null) {
      await trx.deleteFrom('mail_account_imap').where('team_id', '=', teamId).where('mail_account_id', '=', id).execute();
    }
    return trx
      .updateTable('mail_accounts')
      .set({
        // Only what the patch names: a concurrent update of other fields is kept.
        ...(patch.host !== undefined ? { host: account.host } : {}),
        ...(patch.port !== undefined ? { port: account.port } : {}),
        ...(patch.security !== undefined ? { security: account.security } : {}),
        ...(patch.username !== undefined ? { username: account.username } : {}),
        ...(patch.password != null ? { password_enc: box.seal(patch.password) } : username === null ? { password_enc: null } : {}),
        ...(patch.from_email !== undefined ? { from_email: patch.from_email.toLowerCase() } : {}),
        ...(patch.from_name !== undefined ? { from_name: patch.from_name } : {}),
        ...(patch.daily_limit !== undefined ? { daily_limit: patch.daily_limit } : {}),
        ...(patch.campaign_share_percent !== undefined ? { campaign_share_percent: patch.campaign_share_percent } : {}),
        ...(patch.max_per_minute !== undefined ? { max_per_minute: patch.max_per_minute } : {}),
        ...(patch.status !== undefined ? { status: patch.status } : {}),
        ...(patch.verp !== undefined ? { verp: patch.verp } : {}),
        ...(patch.capture_replies !== undefined ? { capture_replies: patch.capture_replies } : {}),
        // Also the version of the sending engine's pooled connection (mail/send.ts): it is rebuilt.
        updated_at: sql<Date>`clock_timestamp()`,
      })
      .where('team_id', '=', teamId)
      .where('id', '=', id)
      .returning(PUBLIC_COLUMNS)
      .executeTakeFirstOrThrow();
  });
  forgetTransport(id);
  return row;
}

export type DeletedMailAccount = { deleted: 'soft' | 'hard'; cancelled: number };

/**
 * Deletes a mail account of the team. While a campaign that is not deleted
 * names it, the answer is 409 naming those campaigns (remove the account from
 * them, or delete them, first): a campaign never loses its accounts behind its
 * back. Messages queued through the account and not yet claimed for SMTP
 * (`queued`, `deferred`) become `cancelled`; one being sent finishes. When the
 * message log references the account, the row stays, marked deleted and
 * disabled, with its password erased; otherwise it is deleted.
 */
export async function deleteMailAccount(db: Db, teamId: string, id: string): Promise<DeletedMailAccount> {
  const result = await db.transaction().execute(async (trx) => {
    const account = await trx
      .selectFrom('mail_accounts')
      .select('id')
      .where('team_id', '=', teamId)
      .where('id', '=', id)
      .where('deleted_at', 'is', null)
      .forUpdate()
      .executeTakeFirst();
    if (!account) throw notFound('mail account');
    // Campaign updates and creates lock the accounts they name (FOR SHARE):
    // one that commits first is seen here, one that comes later waits and then
    // finds this account gone.
    const { rows: users } = await sql<{ id: string; name: string }>`
      SELECT c.id, c.name
        FROM campaigns c
       CROSS JOIN LATERAL (SELECT s.send_data FROM campaign_sends s
                            WHERE s.campaign_id = c.id AND s.team_id = c.team_id
                            ORDER BY s.created_at DESC, s.id DESC LIMIT 1) latest
       WHERE c.team_id = ${teamId} AND c.deleted_at IS NULL
         AND latest.send_data -> 'mail_account_ids' @> jsonb_build_array(${id}::text)
       ORDER BY c.created_at, c.id
       LIMIT 20`.execute(trx);
    if (users.length > 0) {
      throw new AppError(
        'CONFLICT',
        `the mail account is used by ${users.length === 20 ? 'at least 20 campaigns' : users.length === 1 ? 'a campaign' : `${users.length} campaigns`}: ` +
          `${users.map((u) => `"${u.name}"`).join(', ')}; remove it from them or delete them first`,
        users.map((u) => ({ field: 'campaigns', message: `${u.id} (${u.name})` })),
      );
    }
    const cancelled = await sql`
      UPDATE email_send_log SET status = 'cancelled', last_error = 'mail account deleted', updated_at = now()
       WHERE team_id = ${teamId} AND mail_account_id = ${id} AND status IN ('queued', 'deferred')`.execute(trx);
    const { rows: logged } = await sql<{ one: number }>`
      SELECT 1 AS one FROM email_send_log WHERE team_id = ${teamId} AND mail_account_id = ${id} LIMIT 1`.execute(trx);
    if (logged.length > 0) {
      await sql`
        UPDATE mail_accounts SET deleted_at = now(), status = 'disabled', password_enc = NULL, updated_at = clock_timestamp()
         WHERE id = ${id} AND team_id = ${teamId}`.execute(trx);
    } else {
      await sql`DELETE FROM mail_accounts WHERE id = ${id} AND team_id = ${teamId}`.execute(trx);
    }
    return { deleted: logged.length > 0 ? ('soft' as const) : ('hard' as const), cancelled: Number(cancelled.numAffectedRows ?? 0) };
  });
  forgetTransport(id);
  return result;
}
