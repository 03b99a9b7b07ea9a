// Dashboard users, sessions and one-time password links. Passwords are hashed
// with scrypt (memory-hard); session and link tokens are random 256-bit values
// of which only the SHA-256 is stored (full entropy: a fast hash is enough).
import { createHash, randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { normalizeEmail } from '../lib/text.ts';

// N=2^15, r=8: 32 MiB and ~50-100 ms per hash on one core, the OWASP-recommended
// floor for scrypt. Stored in the hash so the cost can be raised later.
const SCRYPT = { N: 2 ** 15, r: 8, p: 1, keylen: 32 };
export const SESSION_DAYS = 14;
export const PASSWORD_LINK_DAYS = 7;
export const MIN_PASSWORD = 10;
export const MAX_PASSWORD = 200;

function scryptAsync(password: string, salt: Buffer, N: number, r: number, p: number, keylen: number): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFC'), salt, keylen, { N, r, p, maxmem: 256 * N * r }, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const { N, r, p, keylen } = SCRYPT;
  const key = await scryptAsync(password, salt, N, r, p, keylen);
  return `scrypt$${N}$${r}$${p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number);
  const salt = Buffer.from(parts[4], 'base64url');
  const expected = Buffer.from(parts[5], 'base64url');
  const key = await scryptAsync(password, salt, N, r, p, expected.length);
  return timingSafeEqual(key, expected);
}

// Compared against when the e-mail is unknown, so a sign-in takes the same time
// whether or not the account exists.
let dummyHash: Promise<string> | undefined;

export const newToken = () => randomBytes(32).toString('base64url');
export const hashToken = (token: string) => createHash('sha256').update(token).digest();

// Re-exported for the CLI's user commands, which take it from here.
export { normalizeEmail };

export type SessionUser = { sessionId: string; userId: string; teamId: string; email: string; teamName: string };

export async function createUser(db: Db, teamId: string, email: string, password: string | null): Promise<{ id: string }> {
  const password_hash = password === null ? null : await hashPassword(password);
  return db
    .insertInto('dashboard_users')
    .values({ team_id: teamId, email: normalizeEmail(email), password_hash })
    .returning('id')
    .executeTakeFirstOrThrow();
}

/** The user id when the e-mail and password match, else null (constant work either way). */
export async function checkCredentials(db: Db, email: string, password: string): Promise<string | null> {
  const user = await db
    .selectFrom('dashboard_users')
    .select(['id', 'password_hash'])
    .where('email', '=', normalizeEmail(email))
    .executeTakeFirst();
  if (!user?.password_hash) {
    dummyHash ??= hashPassword('not a password of anyone');
    await verifyPassword(password, await dummyHash);
    return null;
  }
  return (await verifyPassword(password, user.password_hash)) ? user.id : null;
}

export async function createSession(db: Db, userId: string): Promise<string> {
  // Expired rows are dead weight: each sign-in clears the user's own.
  await db.deleteFrom('dashboard_sessions').where('user_id', '=', userId).where('expires_at', '<=', sql<Date>`now()`).execute();
  const token = newToken();
  await db
    .insertInto('dashboard_sessions')
    .values({ user_id: userId, token_hash: hashToken(token), expires_at: sql<Date>`now() + make_interval(days => ${SESSION_DAYS})` })
    .execute();
  return token;
}

export async function findSession(db: Db, token: string): Promise<SessionUser | undefined> {
  const row = await db
    .selectFrom('dashboard_sessions as s')
    .innerJoin('dashboard_users as u', 'u.id', 's.user_id')
    .innerJoin('teams as t', 't.id', 'u.team_id')
    .select(['s.id as sessionId', 'u.id as userId', 'u.team_id as teamId', 'u.email as email', 't.name as teamName'])
    .where('s.token_hash', '=', hashToken(token))
    .where('s.expires_at', '>', sql<Date>`now()`)
    .executeTakeFirst();
  return row;
}

export async function deleteSession(db: Db, sessionId: string): Promise<void> {
  await db.deleteFrom('dashboard_sessions').where('id', '=', sessionId).execute();
}

/** A one-time link token; with no user, the link creates the team's first user. */
export async function createPasswordToken(db: Db, teamId: string, userId: string | null): Promise<string> {
  const token = newToken();
  await db
    .insertInto('dashboard_password_tokens')
    .values({
      team_id: teamId,
      user_id: userId,
      token_hash: hashToken(token),
      expires_at: sql<Date>`now() + make_interval(days => ${PASSWORD_LINK_DAYS})`,
    })
    .execute();
  return token;
}

export type PasswordLink = { id: string; teamId: string; userId: string | null; email: string | null };

export async function findPasswordToken(db: Db, token: string): Promise<PasswordLink | undefined> {
  return db
    .selectFrom('dashboard_password_tokens as p')
    .leftJoin('dashboard_users as u', 'u.id', 'p.user_id')
    .select(['p.id as id', 'p.team_id as teamId', 'p.user_id as userId', 'u.email as email'])
    .where('p.token_hash', '=', hashToken(token))
    .where('p.used_at', 'is', null)
    .where('p.expires_at', '>', sql<Date>`now()`)
    .executeTakeFirst();
}

export type UsePasswordLinkResult = { kind: 'ok'; userId: string } | { kind: 'invalid' } | { kind: 'email_taken' };

/**
 * Uses a link once: marks it used (the UPDATE's status check makes two racing
 * submits use it at most once) and sets the password, creating the user for a
 * first-start link, all in one transaction.
 */
export async function usePasswordLink(db: Db, token: string, email: string | null, password: string): Promise<UsePasswordLinkResult> {
  const passwordHash = await hashPassword(password);
  return db.transaction().execute(async (tx) => {
    const link = await tx
      .updateTable('dashboard_password_tokens')
      .set({ used_at: sql<Date>`now()` })
      .where('token_hash', '=', hashToken(token))
      .where('used_at', 'is', null)
      .where('expires_at', '>', sql<Date>`now()`)
      .returning(['team_id', 'user_id'])
      .executeTakeFirst();
    if (!link) return { kind: 'invalid' } as const;
    if (link.user_id) {
      await tx.updateTable('dashboard_users').set({ password_hash: passwordHash, updated_at: sql<Date>`now()` }).where('id', '=', link.user_id).execute();
      // A new password ends every existing session of the user.
      await tx.deleteFrom('dashboard_sessions').where('user_id', '=', link.user_id).execute();
      return { kind: 'ok', userId: link.user_id } as const;
    }
    const created = await tx
      .insertInto('dashboard_users')
      .values({ team_id: link.team_id, email: normalizeEmail(email ?? ''), password_hash: passwordHash })
      .onConflict((oc) => oc.column('email').doNothing())
      .returning('id')
      .executeTakeFirst();
    if (!created) throw new EmailTaken();
    return { kind: 'ok', userId: created.id } as const;
  }).catch((err) => {
    // Rolled back, so the link stays usable with another address.
    if (err instanceof EmailTaken) return { kind: 'email_taken' } as const;
    throw err;
  });
}

class EmailTaken extends Error {}
