// Delivery signatures. Two schemes over the same bytes, so receivers can verify
// with either: ours (interface.md 6.4: X-FY-Signature `t=<ts>,v1=<hex>`, HMAC-SHA256
// keyed with the secret string over "<ts>.<body>") and Standard Webhooks
// (webhook-id / webhook-timestamp / webhook-signature `v1,<base64>`, HMAC-SHA256
// keyed with the base64-decoded part of a `whsec_` secret over "<id>.<ts>.<body>").
import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';

/** 32 random bytes in the Standard Webhooks secret format. */
export function newWebhookSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

function standardKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
}

export function fySignature(secret: string, timestamp: number, body: string): string {
  const hex = createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
  return `t=${timestamp},v1=${hex}`;
}

export function signedHeaders(opts: { secret: string; id: string; body: string; timestamp: number; userAgent: string }): Record<string, string> {
  const { secret, id, body, timestamp } = opts;
  const standard = createHmac('sha256', standardKey(secret)).update(`${id}.${timestamp}.${body}`).digest('base64');
  return {
    'content-type': 'application/json',
    'user-agent': opts.userAgent,
    'x-fy-signature': fySignature(secret, timestamp, body),
    'x-fy-origin': 'webhook',
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': `v1,${standard}`,
  };
}
