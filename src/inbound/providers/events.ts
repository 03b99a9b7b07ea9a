// Provider event payloads → feedback items (the normalised form every inbound
// path hands to the feedback core: bounce_hard, bounce_soft, complaint,
// delivered), plus the signature checks of the signed providers. Pure
// functions of the request: no database, no network.
//
// What each provider's fields mean (their documented payloads):
// - SES (inside an SNS Notification's Message): notificationType (or eventType
//   for configuration-set events) Bounce / Complaint / Delivery; mail.messageId
//   is SES's id, the one its SMTP interface returns in "250 Ok <id>";
//   mail.commonHeaders.messageId is our Message-ID. bounceType Permanent is
//   hard; Transient and Undetermined are soft.
// - SendGrid: an array of events; bounce (type "bounce" hard, "blocked" soft),
//   spamreport, delivered. sg_message_id starts with the X-Message-Id its SMTP
//   server returns ("250 Ok: queued as <id>"); smtp-id is our Message-ID.
// - Postmark: one record per request; RecordType Bounce (Type HardBounce,
//   BadEmailAddress, ... hard; SoftBounce, Transient, DnsError soft; a
//   SpamComplaint type is a complaint), SpamComplaint, Delivery. MessageID is
//   Postmark's id (returned by its SMTP server).
// - Mailgun: {signature, event-data}; event failed (severity permanent hard,
//   temporary soft), complained, delivered; message.headers.message-id is
//   the Message-ID of the message.
// Other events (opens, clicks, deferrals, processed, dropped, ...) are
// ignored: we track opens and clicks ourselves, and a deferral is not a bounce.
import { createHmac, createPublicKey, timingSafeEqual, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import type { ProviderName } from '../../db/schema-inbound-providers.ts';

export type FeedbackKind = 'bounce_hard' | 'bounce_soft' | 'complaint' | 'delivered';

/** One normalised provider event; the matching fields are what the provider gave us. */
export type ProviderFeedback = {
  kind: FeedbackKind;
  /** The recipient the event is about (lower-cased). */
  recipient: string | null;
  /** The relay's id of the message (from its SMTP 250 answer). */
  provider_message_id: string | null;
  /** Our Message-ID header, without angle brackets. */
  message_id: string | null;
  /** RFC 3463 status (5.1.1) when the provider gives one. */
  status: string | null;
  /** The remote server's diagnostic or the provider's description. */
  diagnostic: string | null;
  /** ARF feedback type of a complaint (abuse, fraud, ...). */
  feedback_type: string | null;
  occurred_at: Date;
  source: ProviderName;
};

export type ParseResult = { items: ProviderFeedback[]; ignored: number } | { error: string };

const MAX_TEXT = 1_000;

function str(v: unknown, max = MAX_TEXT): string | null {
  if (typeof v !== 'string' && typeof v !== 'number') return null;
  // eslint-disable-next-line no-control-regex
  const s = String(v).replace(/\u0000/g, '').trim();
  return s === '' ? null : s.slice(0, max);
}

function email(v: unknown): string | null {
  const s = str(v, 320);
  if (!s) return null;
  // "Name <a@b>" forms appear in some providers' fields.
  const m = /<([^<>\s]+@[^<>\s]+)>/.exec(s);
  const address = (m ? m[1]! : s).toLowerCase();
  return address.includes('@') ? address : null;
}

/** A Message-ID without its angle brackets and surrounding spaces. */
export function bareMessageId(v: unknown): string | null {
  const s = str(v, 998);
  if (!s) return null;
  const m = /<([^<>]+)>/.exec(s);
  return (m ? m[1]! : s).trim() || null;
}

function when(v: unknown, fallback: Date): Date {
  if (typeof v === 'number' && Number.isFinite(v)) {
    const d = new Date(v < 1e12 ? v * 1000 : v);
    return Number.isNaN(d.getTime()) ? fallback : d;
  }
  if (typeof v === 'string') {
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? fallback : d;
  }
  return fallback;
}

function obj(v: unknown): Record<string, unknown> | null {
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
}

const STATUS_RE = /\b([245])\.(\d{1,3})\.(\d{1,3})\b/;
function statusIn(...texts: (string | null)[]): string | null {
  for (const t of texts) {
    const m = t ? STATUS_RE.exec(t) : null;
    if (m) return m[0];
  }
  return null;
}

function item(source: ProviderName, kind: FeedbackKind, fields: Partial<ProviderFeedback> & { occurred_at: Date }): ProviderFeedback {
  return {
    kind,
    recipient: null,
    provider_message_id: null,
    message_id: null,
    status: null,
    diagnostic: null,
    feedback_type: null,
    source,
    ...fields,
  };
}

// ---------------------------------------------------------------- SES

function sesHeaderMessageId(mail: Record<string, unknown>): string | null {
  const common = obj(mail.commonHeaders);
  if (common?.messageId) return bareMessageId(common.messageId);
  if (Array.isArray(mail.headers)) {
    for (const h of mail.headers.slice(0, 200)) {
      const header = obj(h);
      if (header && typeof header.name === 'string' && header.name.toLowerCase() === 'message-id') return bareMessageId(header.value);
    }
  }
  return null;
}

/** The SES notification inside an SNS Notification's Message (a JSON string). */
export function parseSesNotification(message: string, maxEvents: number, now = new Date()): ParseResult {
  let n: Record<string, unknown> | null;
  try {
    n = obj(JSON.parse(message));
  } catch {
    return { error: 'the SNS Message is not JSON' };
  }
  if (!n) return { error: 'the SNS Message is not a JSON object' };
  const type = str(n.notificationType) ?? str(n.eventType);
  const mail = obj(n.mail);
  if (!type || !mail) return { error: 'not an SES notification (notificationType or eventType, and mail, are required)' };
  const base = { provider_message_id: str(mail.messageId, 200), message_id: sesHeaderMessageId(mail) };
  const items: ProviderFeedback[] = [];
  const list = (v: unknown) => (Array.isArray(v) ? v.slice(0, maxEvents) : []);
  if (type === 'Bounce') {
    const b = obj(n.bounce) ?? {};
    const kind: FeedbackKind = b.bounceType === 'Permanent' ? 'bounce_hard' : 'bounce_soft';
    const at = when(b.timestamp, now);
    for (const r of list(b.bouncedRecipients)) {
      const rec = obj(r) ?? {};
      const diagnostic = str(rec.diagnosticCode) ?? str(b.bounceSubType);
      items.push(item('ses', kind, { ...base, recipient: email(rec.emailAddress), status: statusIn(str(rec.status), diagnostic), diagnostic, occurred_at: at }));
    }
  } else if (type === 'Complaint') {
    const c = obj(n.complaint) ?? {};
    const at = when(c.timestamp, now);
    for (const r of list(c.complainedRecipients)) {
      items.push(item('ses', 'complaint', { ...base, recipient: email(obj(r)?.emailAddress), feedback_type: str(c.complaintFeedbackType, 64), occurred_at: at }));
    }
  } else if (type === 'Delivery') {
    const d = obj(n.delivery) ?? {};
    const at = when(d.timestamp, now);
    for (const r of list(d.recipients)) {
      items.push(item('ses', 'delivered', { ...base, recipient: email(r), diagnostic: str(d.smtpResponse), occurred_at: at }));
    }
  } else {
    return { items: [], ignored: 1 };
  }
  return { items, ignored: 0 };
}

// ---------------------------------------------------------------- SendGrid

/** SendGrid's verification key: base64 DER (as its settings page shows it) or PEM. Null when it is not an EC public key. */
export function sendgridPublicKey(text: string): KeyObject | null {
  try {
    const key = text.includes('-----BEGIN')
      ? createPublicKey(text)
      : createPublicKey({ key: Buffer.from(text.replace(/\s+/g, ''), 'base64'), format: 'der', type: 'spki' });
    return key.asymmetricKeyType === 'ec' ? key : null;
  } catch {
    return null;
  }
}

/** ECDSA (SHA-256) signature of timestamp + raw body, base64 DER, as SendGrid sends it. */
export function verifySendgrid(key: KeyObject, signature: string, timestamp: string, raw: Buffer): boolean {
  try {
    return cryptoVerify('sha256', Buffer.concat([Buffer.from(timestamp, 'utf8'), raw]), key, Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}

export function parseSendgrid(body: unknown, maxEvents: number, now = new Date()): ParseResult {
  if (!Array.isArray(body)) return { error: 'the body must be a JSON array of events' };
  if (body.length > maxEvents) return { error: `at most ${maxEvents} events per request` };
  const items: ProviderFeedback[] = [];
  let ignored = 0;
  for (const raw of body) {
    const e = obj(raw);
    const event = e ? str(e.event, 64) : null;
    if (!e || !event) {
      ignored++;
      continue;
    }
    const sg = str(e.sg_message_id, 200);
    const base = {
      recipient: email(e.email),
      // "<X-Message-Id>.filter…" or "<X-Message-Id>.recvd-…": the part before the first such suffix.
      provider_message_id: sg ? sg.replace(/\.(filter|recvd|ismtpd)[^]*$/i, '') : null,
      message_id: bareMessageId(e['smtp-id']),
      occurred_at: when(e.timestamp, now),
    };
    if (event === 'bounce') {
      const reason = str(e.reason);
      items.push(item('sendgrid', e.type === 'blocked' ? 'bounce_soft' : 'bounce_hard', { ...base, status: statusIn(str(e.status), reason), diagnostic: reason }));
    } else if (event === 'spamreport') {
      items.push(item('sendgrid', 'complaint', { ...base, feedback_type: 'abuse' }));
    } else if (event === 'delivered') {
      items.push(item('sendgrid', 'delivered', { ...base, diagnostic: str(e.response) }));
    } else {
      ignored++;
    }
  }
  return { items, ignored };
}

// ---------------------------------------------------------------- Postmark

const POSTMARK_HARD = new Set(['HardBounce', 'BadEmailAddress', 'ManuallyDeactivated', 'Blocked', 'DMARCPolicy']);
const POSTMARK_SOFT = new Set(['SoftBounce', 'Transient', 'DnsError', 'Unknown', 'ChallengeVerification']);

/** Basic credentials (the URL's user:password) compared without a timing hint. */
export function verifyBasic(header: string | undefined, user: string, password: string): boolean {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '');
  if (!m) return false;
  const given = Buffer.from(m[1]!, 'base64');
  const expected = Buffer.from(`${user}:${password}`, 'utf8');
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export function parsePostmark(body: unknown, now = new Date()): ParseResult {
  const r = obj(body);
  const recordType = r ? str(r.RecordType, 64) : null;
  if (!r || !recordType) return { error: 'the body must be a Postmark webhook record (RecordType is required)' };
  const base = {
    recipient: email(r.Email ?? r.Recipient),
    provider_message_id: str(r.MessageID, 200),
    message_id: null,
  };
  if (recordType === 'Bounce') {
    const type = str(r.Type, 64) ?? '';
    const diagnostic = str(r.Details) ?? str(r.Description);
    const at = when(r.BouncedAt, now);
    if (type === 'SpamComplaint') return { items: [item('postmark', 'complaint', { ...base, feedback_type: 'abuse', occurred_at: at })], ignored: 0 };
    const kind: FeedbackKind | null = POSTMARK_HARD.has(type) ? 'bounce_hard' : POSTMARK_SOFT.has(type) ? 'bounce_soft' : null;
    if (!kind) return { items: [], ignored: 1 };
    return { items: [item('postmark', kind, { ...base, status: statusIn(diagnostic), diagnostic, occurred_at: at })], ignored: 0 };
  }
  if (recordType === 'SpamComplaint') {
    return { items: [item('postmark', 'complaint', { ...base, feedback_type: 'abuse', occurred_at: when(r.BouncedAt, now) })], ignored: 0 };
  }
  if (recordType === 'Delivery') {
    return { items: [item('postmark', 'delivered', { ...base, diagnostic: str(r.Details), occurred_at: when(r.DeliveredAt, now) })], ignored: 0 };
  }
  return { items: [], ignored: 1 };
}

// ---------------------------------------------------------------- Mailgun

/** HMAC-SHA256 of timestamp + token with the webhook signing key, hex. */
export function verifyMailgun(signingKey: string, signature: Record<string, unknown> | null): boolean {
  const timestamp = str(signature?.timestamp, 32);
  const token = str(signature?.token, 256);
  const given = str(signature?.signature, 128);
  if (!timestamp || !token || !given || !/^[0-9a-f]{64}$/i.test(given)) return false;
  const expected = createHmac('sha256', signingKey).update(timestamp + token).digest();
  return timingSafeEqual(expected, Buffer.from(given, 'hex'));
}

export function parseMailgun(body: unknown, now = new Date()): ParseResult {
  const b = obj(body);
  const e = obj(b?.['event-data']);
  const event = e ? str(e.event, 64) : null;
  if (!e || !event) return { error: 'the body must be a Mailgun webhook (event-data.event is required)' };
  const headers = obj(obj(e.message)?.headers) ?? {};
  const messageId = bareMessageId(headers['message-id']);
  const base = { recipient: email(e.recipient), provider_message_id: messageId, message_id: messageId, occurred_at: when(e.timestamp, now) };
  if (event === 'failed') {
    const ds = obj(e['delivery-status']) ?? {};
    const diagnostic = str(ds.description) || str(ds.message);
    const kind: FeedbackKind = e.severity === 'permanent' ? 'bounce_hard' : 'bounce_soft';
    return { items: [item('mailgun', kind, { ...base, status: statusIn(str(ds['enhanced-code']), str(ds.message), diagnostic), diagnostic })], ignored: 0 };
  }
  if (event === 'complained') return { items: [item('mailgun', 'complaint', { ...base, feedback_type: 'abuse' })], ignored: 0 };
  if (event === 'delivered') {
    const ds = obj(e['delivery-status']) ?? {};
    return { items: [item('mailgun', 'delivered', { ...base, diagnostic: str(ds.message) })], ignored: 0 };
  }
  return { items: [], ignored: 1 };
}

/** A signed timestamp (seconds since the epoch) within the replay window. */
export function freshTimestamp(raw: unknown, maxAgeS: number, now = Date.now()): boolean {
  const s = typeof raw === 'number' ? raw : typeof raw === 'string' && /^\d{1,12}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isFinite(s)) return false;
  const age = now / 1000 - s;
  return age <= maxAgeS && age >= -300;
}
