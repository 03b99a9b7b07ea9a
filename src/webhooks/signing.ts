// Delivery signatures. Two schemes over the same bytes, so receivers can verify
// with either: ours (docs/api.md, "Signatures": X-FY-Signature `t=<ts>,v1=<hex>`, HMAC-SHA256
// keyed with the secret string over "<ts>.<body>") and Standard Webhooks
// (webhook-id / webhook-timestamp / webhook-signature `v1,<base64>`, HMAC-SHA256
// keyed with the base64-decoded part of a `whsec_` secret over "<id>.<ts>.<body>").
import { createHmac, createSecretKey, randomBytes, type KeyObject } from 'node:crypto';

const PREFIX = 'whsec_';

/** 32 random bytes in the Standard Webhooks secret format. */
export function newWebhookSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

function standardKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
}

/** Both HMAC keys of a secret, prepared once (the dispatcher keeps them per webhook). */
export type SigningKeys = { fy: KeyObject; standard: KeyObject };

export function signingKeys(secret: string): SigningKeys {
  return { fy: createSecretKey(Buffer.from(secret, 'utf8')), standard: createSecretKey(standardKey(secret)) };
}

export function fySignature(key: KeyObject | string, timestamp: number, body: string): string {
  const hex = createHmac('sha256', key).update(`${timestamp}.${body}`).digest('hex');
  return `t=${timestamp},v1=${hex}`;
}

export function signedHeaders(opts: { keys: SigningKeys; id: string; body: string; timestamp: number; userAgent: string }): Record<string, string> {
  const { keys, id, body, timestamp } = opts;
  const standard = createHmac('sha256', keys.standard).update(`${id}.${timestamp}.${body}`).digest('base64');
  return {
    'content-type': 'application/json',
    'user-agent': opts.userAgent,
    'x-fy-signature': fySignature(keys.fy, timestamp, body),
    'x-fy-origin': 'webhook',
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': `v1,${standard}`,
  };
}
