// Signed tracking URLs. Every URL put into a sent message (open pixel, click
// redirect, honeypot link, unsubscribe page, List-Unsubscribe) carries the send
// log id and an HMAC over (kind, id[, target URL]) keyed from APP_SECRET, so a
// recipient cannot forge an open for another message, unsubscribe someone else,
// or turn the click redirect into an open redirect to a URL we never sent.
// Unsubscribe links sign the recipient instead (team and contact, or team and
// address): retention deletes old send log rows, and an unsubscribe link in an
// old e-mail must keep working after its row is gone.
import { createHmac, createSecretKey, hkdfSync, timingSafeEqual, type KeyObject } from 'node:crypto';
import { normalizeEmail } from './text.ts';

export type LinkKind = 'open' | 'click' | 'honeypot' | 'unsubscribe';

const KIND_CODE: Record<LinkKind, string> = { open: 'o', click: 'c', honeypot: 'h', unsubscribe: 'u' };
// 16 bytes of HMAC-SHA256 (128 bits) keep URLs short and are far beyond guessing.
const SIG_BYTES = 16;

export class TrackingLinks {
  // A KeyObject, not a Buffer: Node 24 turns a Buffer key into a key object on
  // every createHmac (about 15 µs against 3, several links per message).
  private readonly key: KeyObject;
  private readonly base: string;

  constructor(publicUrl: string, appSecret: string) {
    this.base = publicUrl.replace(/\/+$/, '');
    this.key = createSecretKey(Buffer.from(hkdfSync('sha256', appSecret, 'plover', 'plover:tracking-links', 32)));
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

  /**
   * The format before retention: valid while its send log row exists. No
   * longer made for messages whose recipient is known; still accepted.
   */
  unsubscribeUrl(sendLogId: string): string {
    return `${this.base}/u/${sendLogId}/${this.sign('unsubscribe', sendLogId)}`;
  }

  /**
   * GET shows a confirmation page; POST unsubscribes (also the RFC 8058
   * one-click target). Names the contact (`c`) when there is one, else the
   * address (`a`, base64url of the lower-cased address), within the team.
   */
  recipientUnsubscribeUrl(r: UnsubscribeRecipient): string {
    const ref = recipientRef(r);
    return `${this.base}/u/${ref.by}/${r.teamId}/${ref.value}/${this.signRecipient(r.teamId, ref.by, ref.value)}`;
  }

  signRecipient(teamId: string, by: RecipientBy, value: string): string {
    return createHmac('sha256', this.key)
      .update(`u2\n${teamId}\n${by}\n${value}`)
      .digest()
      .subarray(0, SIG_BYTES)
      .toString('base64url');
  }

  verifyRecipient(teamId: string, by: RecipientBy, value: string, signature: string): boolean {
    const expected = Buffer.from(this.signRecipient(teamId, by, value));
    const given = Buffer.from(String(signature));
    return given.length === expected.length && timingSafeEqual(given, expected);
  }
}

/** Who an unsubscribe link is for: the message's team, and its contact when it has one. */
export type UnsubscribeRecipient = { teamId: string; contactId: string | null; email: string };
export type RecipientBy = 'c' | 'a';

function recipientRef(r: UnsubscribeRecipient): { by: RecipientBy; value: string } {
  return r.contactId
    ? { by: 'c', value: r.contactId }
    : { by: 'a', value: Buffer.from(normalizeEmail(r.email), 'utf8').toString('base64url') };
}
