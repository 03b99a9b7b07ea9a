// The signed addresses of mail that comes back, under INBOUND_DOMAIN:
//   b-<send-log id, 32 hex>-<signature, 16 hex>@domain   return path (MAIL FROM) of one message (VERP)
//   r-<send-log id, 32 hex>-<signature, 16 hex>@domain   its Reply-To, when the account captures replies
// The signature is an HMAC (a key derived from APP_SECRET) of the kind and the
// id, cut to 64 bits: nobody can make an address for a message (or a kind) we
// did not sign, and the listener refuses at RCPT every address that does not
// verify. Local parts are compared case-insensitively (some MTAs change case).
import { createHmac, createSecretKey, hkdfSync, timingSafeEqual, type KeyObject } from 'node:crypto';

export type InboundAddress = { type: 'bounce' | 'reply'; message_id: string } | { type: 'fbl' };

// KeyObjects: a Buffer key costs a key object per createHmac (tracking-links.ts).
const keys = new Map<string, KeyObject>();
function keyFor(secret: string): KeyObject {
  let k = keys.get(secret);
  if (!k) {
    k = createSecretKey(Buffer.from(hkdfSync('sha256', secret, 'plover', 'inbound-address-v1', 32)));
    keys.set(secret, k);
  }
  return k;
}

const sign = (secret: string, prefix: 'b' | 'r', hex: string) =>
  createHmac('sha256', keyFor(secret)).update(`${prefix}:${hex}`).digest().subarray(0, 8);

function make(prefix: 'b' | 'r', secret: string, domain: string, logId: string): string {
  const hex = logId.replace(/-/g, '').toLowerCase();
  if (!/^[0-9a-f]{32}$/.test(hex)) throw new Error(`not a send-log id: ${logId}`);
  return `${prefix}-${hex}-${sign(secret, prefix, hex).toString('hex')}@${domain}`;
}

/** The signed return path (MAIL FROM) of one message. */
export const returnPathAddress = (secret: string, domain: string, logId: string): string => make('b', secret, domain, logId);
/** The signed Reply-To of one message. */
export const replyAddress = (secret: string, domain: string, logId: string): string => make('r', secret, domain, logId);

const LOCAL = /^([br])-([0-9a-f]{32})-([0-9a-f]{16})$/;

/**
 * What an address the listener was given means, or null: not under the
 * domain, not ours, or a signature that does not verify.
 */
export function parseInboundAddress(secret: string, domain: string, fblAddress: string | undefined, address: string): InboundAddress | null {
  const a = address.trim().toLowerCase();
  if (fblAddress && a === fblAddress.toLowerCase()) return { type: 'fbl' };
  const at = a.lastIndexOf('@');
  if (at < 0 || a.slice(at + 1) !== domain.toLowerCase()) return null;
  const m = LOCAL.exec(a.slice(0, at));
  if (!m) return null;
  const [, prefix, hex, sig] = m as unknown as [string, 'b' | 'r', string, string];
  if (!timingSafeEqual(sign(secret, prefix, hex), Buffer.from(sig, 'hex'))) return null;
  const id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  return { type: prefix === 'b' ? 'bounce' : 'reply', message_id: id };
}
