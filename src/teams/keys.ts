// API keys: `plv_live_` + 43 base64url characters (32 random bytes, 256 bits).
// Only the SHA-256 digest is stored; a fast hash is right here because the key
// itself has full entropy (no dictionary to attack), and it keeps auth at one
// indexed lookup.
import { createHash, randomBytes } from 'node:crypto';

export const KEY_PREFIX = 'plv_live_';
const KEY_RE = /^plv_live_[A-Za-z0-9_-]{43}$/;

export function generateApiKey(): { key: string; prefix: string; hash: Buffer } {
  const key = KEY_PREFIX + randomBytes(32).toString('base64url');
  return { key, prefix: key.slice(0, KEY_PREFIX.length + 6), hash: hashApiKey(key) };
}

export function hashApiKey(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** Cheap shape check that spares the database lookups for obvious garbage. */
export function looksLikeApiKey(key: string): boolean {
  return KEY_RE.test(key);
}
