// DKIM keys of a mail account: generated here (RSA 2048 or Ed25519, node:crypto),
// the private key sealed at rest (SecretBox, its own purpose key), the public
// key shown as the DNS TXT record to publish. States (docs/decisions.md, "DKIM"):
//
//   pending  created, not signing: the team publishes the record, then activates it
//   active   signs every message of the account (at most one per algorithm)
//   retired  was active until a newer key of its algorithm was activated
//
// Rotation without a gap: the new key waits `pending` under its own selector
// while the old one keeps signing; activating it retires the old one in the
// same transaction. Activation looks the record up first (unless forced), so a
// key whose record is not published yet never signs.
import { createPrivateKey, generateKeyPair } from 'node:crypto';
import { Type, type Static } from 'typebox';
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { AppError, notFound, validationFailed } from '../lib/errors.ts';
import { DateTime } from '../http/schemas.ts';
import { SecretBox } from '../lib/secrets.ts';
import { lookupDkimRecord, type TxtResolver } from './dns-check.ts';

export const DKIM_ALGORITHMS = ['rsa', 'ed25519'] as const;
export type DkimAlgorithm = (typeof DKIM_ALGORITHMS)[number];
export type DkimStatus = 'pending' | 'active' | 'retired';

/** Keys per mail account, all states together: rotation needs two or three; a retired key can be deleted. */
export const MAX_DKIM_KEYS_PER_ACCOUNT = 10;
const RSA_BITS = 2048;

// One or more DNS labels of letters, digits and hyphens (RFC 6376 3.1), 63 characters at most in all.
const SELECTOR_RE = /^(?=.{1,63}$)[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$/;

export const DkimKeyBody = Type.Object(
  {
    algorithm: Type.Enum(DKIM_ALGORITHMS, { description: '`rsa` (2048 bits, signs rsa-sha256) or `ed25519` (signs ed25519-sha256, RFC 8463).' }),
    selector: Type.Optional(
      Type.String({
        minLength: 1, maxLength: 63,
        description: 'The DNS selector (`s=`): letters, digits, hyphens, dot-separated labels. Default: the algorithm and today\'s date, e.g. `rsa20261124`.',
      }),
    ),
  },
  { additionalProperties: false },
);
export type DkimKeyInput = Static<typeof DkimKeyBody>;

export const ActivateBody = Type.Object(
  {
    force: Type.Optional(
      Type.Boolean({ default: false, description: 'Activate without looking the DNS record up first (signatures fail to verify until it is published).' }),
    ),
  },
  { additionalProperties: false },
);

export const DnsRecord = Type.Object({
  type: Type.Literal('TXT'),
  name: Type.String({ description: '`<selector>._domainkey.<domain>`' }),
  value: Type.String({ description: '`v=DKIM1; k=rsa|ed25519; p=<public key>`' }),
});

export const DkimKey = Type.Object(
  {
    id: Type.String(),
    mail_account_id: Type.String(),
    algorithm: Type.Enum(DKIM_ALGORITHMS),
    domain: Type.String({ description: 'The signing domain (`d=`): the account\'s From domain when the key was made.' }),
    selector: Type.String(),
    status: Type.Enum(['pending', 'active', 'retired'], {
      description: '`pending`: not signing yet (publish the record, then activate); `active`: signs every message; `retired`: replaced by a newer key.',
    }),
    dns_record: DnsRecord,
    created_at: DateTime,
    activated_at: Type.Union([DateTime, Type.Null()]),
    retired_at: Type.Union([DateTime, Type.Null()]),
  },
  { title: 'DkimKey' },
);

export type DkimKeyRow = {
  id: string;
  team_id: string;
  mail_account_id: string;
  algorithm: DkimAlgorithm;
  domain: string;
  selector: string;
  public_key: string;
  status: DkimStatus;
  created_at: Date;
  activated_at: Date | null;
  retired_at: Date | null;
};

// Every column but private_key_enc: the sealed key leaves this module only through loadSigningKeys.
const PUBLIC_COLUMNS = [
  'id', 'team_id', 'mail_account_id', 'algorithm', 'domain', 'selector', 'public_key', 'status', 'created_at', 'activated_at', 'retired_at',
] as const;

/** The TXT record that publishes a key. */
export function dnsRecordOf(k: Pick<DkimKeyRow, 'algorithm' | 'domain' | 'selector' | 'public_key'>) {
  return { type: 'TXT' as const, name: `${k.selector}._domainkey.${k.domain}`, value: `v=DKIM1; k=${k.algorithm}; p=${k.public_key}` };
}

export function toDkimKey(row: DkimKeyRow) {
  return {
    id: row.id,
    mail_account_id: row.mail_account_id,
    algorithm: row.algorithm,
    domain: row.domain,
    selector: row.selector,
    status: row.status,
    dns_record: dnsRecordOf(row),
    created_at: row.created_at.toISOString(),
    activated_at: row.activated_at?.toISOString() ?? null,
    retired_at: row.retired_at?.toISOString() ?? null,
  };
}

const boxes = new Map<string, SecretBox>();
function keyBox(appSecret: string): SecretBox {
  let box = boxes.get(appSecret);
  if (!box) boxes.set(appSecret, (box = new SecretBox(appSecret, 'dkim-private-key')));
  return box;
}

/** The domain part of an address, lower-cased. */
export const domainOf = (email: string): string => email.slice(email.lastIndexOf('@') + 1).toLowerCase();

// Ed25519 SubjectPublicKeyInfo (DER) = this 12-byte prefix + the raw 32-byte key.
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/**
 * A new key pair: the private key as PKCS#8 PEM, the public key as the record's
 * `p=` value. Runs in libuv's thread pool (an RSA 2048 key takes ~50-200 ms of CPU),
 * not on the event loop.
 */
export async function generateDkimKeyPair(algorithm: DkimAlgorithm): Promise<{ privateKeyPem: string; publicKey: string }> {
  const { publicKey, privateKey } = await new Promise<{ publicKey: Buffer; privateKey: string }>((resolve, reject) => {
    const done = (err: Error | null, publicKey: Buffer, privateKey: string) => (err ? reject(err) : resolve({ publicKey, privateKey }));
    const publicKeyEncoding = { type: 'spki', format: 'der' } as const;
    const privateKeyEncoding = { type: 'pkcs8', format: 'pem' } as const;
    if (algorithm === 'rsa') generateKeyPair('rsa', { modulusLength: RSA_BITS, publicKeyEncoding, privateKeyEncoding }, done);
    else generateKeyPair('ed25519', { publicKeyEncoding, privateKeyEncoding }, done);
  });
  if (algorithm === 'rsa') return { privateKeyPem: privateKey, publicKey: publicKey.toString('base64') };
  // RFC 8463: the record carries the bare 32-byte key, not the SubjectPublicKeyInfo.
  if (!publicKey.subarray(0, 12).equals(ED25519_SPKI_PREFIX)) throw new Error('unexpected Ed25519 public key encoding');
  return { privateKeyPem: privateKey, publicKey: publicKey.subarray(12).toString('base64') };
}

type AccountRef = { id: string; from_email: string };

async function ownAccount(db: Db, teamId: string, accountId: string): Promise<AccountRef> {
  const row = await db.selectFrom('mail_accounts').select(['id', 'from_email']).where('team_id', '=', teamId).where('id', '=', accountId).executeTakeFirst();
  if (!row) throw notFound('mail account');
  return row;
}

function today(now: Date): string {
  return now.toISOString().slice(0, 10).replace(/-/g, '');
}

/** `rsa20261124`, or with `-2`, `-3`, ... when the team already uses it for the domain. */
async function defaultSelector(db: Db, teamId: string, domain: string, algorithm: DkimAlgorithm, now: Date): Promise<string> {
  const base = `${algorithm === 'rsa' ? 'rsa' : 'ed'}${today(now)}`;
  const taken = new Set(
    (await db.selectFrom('dkim_keys').select('selector').where('team_id', '=', teamId).where('domain', '=', domain)
      .where('selector', 'like', `${base}%`).execute()).map((r) => r.selector),
  );
  if (!taken.has(base)) return base;
  for (let i = 2; ; i++) if (!taken.has(`${base}-${i}`)) return `${base}-${i}`;
}

const selectorTaken = (selector: string, domain: string) =>
  new AppError('CONFLICT', `selector ${selector} is already used for ${domain}`, [
    { field: 'selector', message: `is already used by another key of this team for ${domain}` },
  ]);

/** Generates a key for the team's account, `pending`. 404 for another team's account; 422 bad input or too many keys; 409 a used selector. */
export async function createDkimKey(
  db: Db, appSecret: string, teamId: string, accountId: string, input: DkimKeyInput, now = new Date(),
): Promise<DkimKeyRow> {
  const selector = input.selector?.trim().toLowerCase();
  if (selector !== undefined && !SELECTOR_RE.test(selector)) {
    throw validationFailed([{ field: 'selector', message: 'must be DNS labels of letters, digits and hyphens, separated by dots (63 characters at most)' }]);
  }
  const account = await ownAccount(db, teamId, accountId);
  const domain = domainOf(account.from_email);
  const tooMany = () =>
    validationFailed(
      [{ field: 'algorithm', message: `a mail account has at most ${MAX_DKIM_KEYS_PER_ACCOUNT} DKIM keys: delete a retired or pending one first` }],
      'too many DKIM keys',
    );
  // Checked before the key is made (an RSA key costs CPU), and again under the account's lock.
  if ((await countKeys(db, accountId)) >= MAX_DKIM_KEYS_PER_ACCOUNT) throw tooMany();
  const pair = await generateDkimKeyPair(input.algorithm);
  let chosen = selector ?? '';
  try {
    return await db.transaction().execute(async (tx) => {
      // One create at a time per account, so the cap and the default selector hold under concurrency.
      await sql`SELECT 1 FROM mail_accounts WHERE id = ${accountId} FOR UPDATE`.execute(tx);
      if ((await countKeys(tx, accountId)) >= MAX_DKIM_KEYS_PER_ACCOUNT) throw tooMany();
      chosen = selector ?? (await defaultSelector(tx, teamId, domain, input.algorithm, now));
      const exists = await tx.selectFrom('dkim_keys').select('id')
        .where('team_id', '=', teamId).where('domain', '=', domain).where('selector', '=', chosen).executeTakeFirst();
      if (exists) throw selectorTaken(chosen, domain);
      return tx
        .insertInto('dkim_keys')
        .values({
          team_id: teamId, mail_account_id: accountId, algorithm: input.algorithm, domain, selector: chosen,
          public_key: pair.publicKey, private_key_enc: keyBox(appSecret).seal(pair.privateKeyPem),
        })
        .returning(PUBLIC_COLUMNS)
        .executeTakeFirstOrThrow();
    });
  } catch (err) {
    // The same selector for the domain from another account of the team at the same moment: the index decides.
    if ((err as { code?: string }).code === '23505') throw selectorTaken(chosen, domain);
    throw err;
  }
}

async function countKeys(db: Db, accountId: string): Promise<number> {
  const { n } = await db.selectFrom('dkim_keys').select((eb) => eb.fn.countAll<string>().as('n')).where('mail_account_id', '=', accountId).executeTakeFirstOrThrow();
  return Number(n);
}

/** The account's keys, newest first (a 404 for another team's account). */
export async function listDkimKeys(db: Db, teamId: string, accountId: string): Promise<DkimKeyRow[]> {
  await ownAccount(db, teamId, accountId);
  return db.selectFrom('dkim_keys').select(PUBLIC_COLUMNS).where('team_id', '=', teamId).where('mail_account_id', '=', accountId)
    .orderBy('created_at', 'desc').orderBy('id', 'desc').execute();
}

async function findKey(db: Db, teamId: string, accountId: string, keyId: string): Promise<DkimKeyRow> {
  const row = await db.selectFrom('dkim_keys').select(PUBLIC_COLUMNS)
    .where('team_id', '=', teamId).where('mail_account_id', '=', accountId).where('id', '=', keyId).executeTakeFirst();
  if (!row) throw notFound('DKIM key');
  return row;
}

/**
 * Makes a key the account's signing key of its algorithm; the one it replaces
 * becomes `retired` in the same transaction, so some key signs at every moment.
 * Unless `force`, the key's DNS record must be published first: 409 CONFLICT
 * saying what the lookup found. Activating the active key again is a no-op.
 */
export async function activateDkimKey(
  db: Db, teamId: string, accountId: string, keyId: string, opts: { force?: boolean; resolveTxt: TxtResolver },
): Promise<DkimKeyRow> {
  const key = await findKey(db, teamId, accountId, keyId);
  if (key.status === 'active') return key;
  if (!opts.force) {
    const found = await lookupDkimRecord(key, opts.resolveTxt);
    if (found.status !== 'found') {
      throw new AppError('CONFLICT', `the DKIM record of selector ${key.selector} is not published yet: ${found.message}`, [
        { field: 'dns', message: found.message },
      ]);
    }
  }
  return db.transaction().execute(async (tx) => {
    // Serialises activations of one account, so two at once cannot both pass the active-key index.
    await sql`SELECT 1 FROM mail_accounts WHERE id = ${accountId} FOR UPDATE`.execute(tx);
    await tx.updateTable('dkim_keys').set({ status: 'retired', retired_at: sql<Date>`now()` })
      .where('mail_account_id', '=', accountId).where('algorithm', '=', key.algorithm).where('status', '=', 'active').where('id', '<>', keyId)
      .execute();
    const row = await tx.updateTable('dkim_keys').set({ status: 'active', activated_at: sql<Date>`now()`, retired_at: null })
      .where('team_id', '=', teamId).where('id', '=', keyId).returning(PUBLIC_COLUMNS).executeTakeFirst();
    // Deleted between the lookup and now.
    if (!row) throw notFound('DKIM key');
    return row;
  });
}

/** Deletes a key (any state: deleting the active key stops signing with its algorithm). */
export async function deleteDkimKey(db: Db, teamId: string, accountId: string, keyId: string): Promise<void> {
  const res = await db.deleteFrom('dkim_keys').where('team_id', '=', teamId).where('mail_account_id', '=', accountId).where('id', '=', keyId).executeTakeFirst();
  if (Number(res.numDeletedRows) === 0) throw notFound('DKIM key');
}

// ---------------------------------------------------------------------------
// Signing (the send path)

/** An active key as the send path loads it with the message's account. */
export type ActiveKey = { id: string; algorithm: DkimAlgorithm; domain: string; selector: string };

/** What mailauth's signer takes for one signature. */
export type SignatureData = { signingDomain: string; selector: string; privateKey: string; algorithm: string };

// Opened private keys by key id. A key's material never changes (rotation makes
// a new row), so entries never go stale; a deleted key is simply no longer
// asked for. Bounded: past the cap the cache starts over.
const PRIVATE_KEY_CACHE_MAX = 1_000;
const privateKeys = new Map<string, string | null>();

/**
 * The opened private keys of these active keys, one query for the ones not
 * cached yet. A key that does not open or parse (a changed APP_SECRET) maps to
 * null and is left out of signing, with `onError` told once.
 */
export async function loadSigningKeys(
  db: Db, appSecret: string, keys: ActiveKey[], onError: (keyId: string, err: unknown) => void = () => {},
): Promise<Map<string, string>> {
  const missing = [...new Set(keys.map((k) => k.id).filter((id) => !privateKeys.has(id)))];
  if (missing.length > 0) {
    const rows = await db.selectFrom('dkim_keys').select(['id', 'private_key_enc']).where('id', 'in', missing).execute();
    if (privateKeys.size + rows.length > PRIVATE_KEY_CACHE_MAX) privateKeys.clear();
    for (const r of rows) {
      try {
        const pem = keyBox(appSecret).open(r.private_key_enc);
        createPrivateKey(pem); // parses, so a broken key fails here, not inside the signer
        privateKeys.set(r.id, pem);
      } catch (err) {
        privateKeys.set(r.id, null);
        onError(r.id, err);
      }
    }
  }
  const out = new Map<string, string>();
  for (const k of keys) {
    const pem = privateKeys.get(k.id);
    if (pem) out.set(k.id, pem);
  }
  return out;
}

/**
 * The signatures one message gets: one per active key whose domain is the
 * From domain (a key made before the account's address moved to another
 * domain would not align with From, so it does not sign). RSA first, then Ed25519.
 */
export function signaturesFor(keys: ActiveKey[], opened: Map<string, string>, fromEmail: string): SignatureData[] {
  const domain = domainOf(fromEmail);
  return keys
    .filter((k) => k.domain === domain && opened.has(k.id))
    .sort((a, b) => (a.algorithm === b.algorithm ? 0 : a.algorithm === 'rsa' ? -1 : 1))
    .map((k) => ({ signingDomain: k.domain, selector: k.selector, privateKey: opened.get(k.id)!, algorithm: `${k.algorithm}-sha256` }));
}
