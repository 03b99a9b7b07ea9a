// Signed tracking URLs. Every URL put into a sent message (open pixel, click
// redirect, honeypot link, unsubscribe page, List-Unsubscribe) carries the send
// log id and an HMAC over (kind, id[, target URL]) keyed from APP_SECRET, so a
// recipient cannot forge an open for another message, unsubscribe someone else,
// or turn the click redirect into an open redirect to a URL we never sent.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

export type LinkKind = 'open' | 'click' | 'honeypot' | 'unsubscribe';

const KIND_CODE: Record<LinkKind, string> = { open: 'o', click: 'c', honeypot: 'h', unsubscribe: 'u' };
// 16 bytes of HMAC-SHA256 (128 bits) keep URLs short and are far beyond guessing.
const SIG_BYTES = 16;

export class TrackingLinks {
  private readonly key: Buffer;
  private readonly base: string;

  constructor(publicUrl: string, appSecret: string) {
    this.base = publicUrl.replace(/\/+$/, '');
    this.key = Buffer.from(hkdfSync('sha256', appSecret, 'plover', 'plover:tracking-links', 32));
  }

  sign(kind: LinkKind, sendLogId: string, target = ''): string {
    return createHmac('sha256', this.key)
      .update(`${KIND_CODE[kind]}\n${sendLogId}\n${target}`)
      .digest()
      .subarray(0, SIG_BYTES)
      .toString('base64url');
  }

  verify(kind: LinkKind, sendLogId: string, signature: string, target = ''): boolean {
    const expected = Buffer.from(this.sign(kind, sendLogId, target));
    const given = Buffer.from(String(signature));
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  /** GET → 1×1 GIF. */
  openPixelUrl(sendLogId: string): string {
    return `${this.base}/t/o/${sendLogId}/${this.sign('open', sendLogId)}.gif`;
  }

  /** GET → 302 to `url`, only when the signature covers exactly that URL. */
  clickUrl(sendLogId: string, url: string): string {
    return `${this.base}/t/c/${sendLogId}/${this.sign('click', sendLogId, url)}?u=${encodeURIComponent(url)}`;
  }

  /** A link hidden from people (bot signal when followed). */
  honeypotUrl(sendLogId: string): string {
    return `${this.base}/t/h/${sendLogId}/${this.sign('honeypot', sendLogId)}`;
  }

  /** GET shows a confirmation page; POST unsubscribes (also the RFC 8058 one-click target). */
  unsubscribeUrl(sendLogId: string): string {
    return `${this.base}/u/${sendLogId}/${this.sign('unsubscribe', sendLogId)}`;
  }
}
