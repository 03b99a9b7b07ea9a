// What one inbound message is: a delivery status notification (RFC 3464) → a
// hard or soft bounce by the RFC 3463 class of its status; a feedback report
// (ARF, RFC 5965) → a complaint; otherwise a reply, matched by In-Reply-To /
// References or by the signed reply address it was sent to. Runs in the
// untrusted pool (pool-tasks.ts `classifyInbound`), never on the event loop
// that answers requests: the message is anyone's bytes.
//
// The MIME structure is read with mailsplit (the splitter under mailparser),
// whose node count is capped and whose nesting depth we cap as nodes appear;
// the report parts (message/delivery-status, message/feedback-report) are
// header-style field blocks, read with mailsplit's header parser. Attached
// original messages are not parsed as MIME: only their header block is read
// (the original Message-ID is how a DSN without a signed return path finds its
// message). A reply's text is decoded with mailparser.
import type { EventEmitter } from 'node:events';
import { Headers, Splitter } from '@zone-eu/mailsplit';
import { simpleParser } from 'mailparser';
import { REPLY_TEXT_MAX, bareMessageId, logIdFromMessageId, type Feedback } from './feedback-input.ts';

export type ParseLimits = {
  /** MIME parts at most (mailsplit's node count). */
  maxParts: number;
  /** Nesting depth of MIME parts at most. */
  maxDepth: number;
};

export const DEFAULT_PARSE_LIMITS: ParseLimits = { maxParts: 100, maxDepth: 10 };

/** What the address the message was sent to says (inbound/address.ts). */
export type AddressHint = { type: 'bounce' | 'reply'; message_id: string } | { type: 'fbl' };

export type Unmatched = { kind: 'unmatched'; reason: string };
export type Classified = Feedback[] | Unmatched;

// Bytes kept of each part we read: report parts are small; of an attached
// original only its header block matters.
const REPORT_PART_MAX = 64 * 1024;
const TEXT_PART_MAX = 64 * 1024;
const HEADER_VALUE_MAX = 1000;

type Structure = {
  root: Headers;
  reportType: string | null;
  parts: { contentType: string; body: Buffer }[];
};

const KEPT = new Set([
  'message/delivery-status', 'message/global-delivery-status', 'message/feedback-report',
  'message/rfc822', 'message/global', 'text/rfc822-headers', 'message/global-headers', 'text/plain',
]);

class LimitError extends Error {}

/** Splits the message, keeping the parts we read (decoded), within the limits. */
async function structure(raw: Buffer, limits: ParseLimits): Promise<Structure> {
  // ignoreEmbedded: an attached message is a leaf whose bytes we keep (its header block is all we read).
  const splitter = new Splitter({ ignoreEmbedded: true, maxChildNodes: limits.maxParts, maxHeadSize: 256 * 1024 });
  const parts: Structure['parts'] = [];
  let root: Headers | null = null;
  let reportType: string | null = null;
  const depthOf = new Map<object, number>();
  let current: { contentType: string; chunks: Buffer[]; bytes: number; encoding: string } | null = null;
  const close = () => {
    if (!current) return;
    parts.push({ contentType: current.contentType, body: decode(Buffer.concat(current.chunks), current.encoding) });
    current = null;
  };
  await new Promise<void>((resolve, reject) => {
    splitter.on('data', (data: any) => {
      if (data.type === 'node') {
        close();
        const depth = data.parentNode ? (depthOf.get(data.parentNode) ?? 0) + 1 : 0;
        if (depth > limits.maxDepth) {
          splitter.destroy(new LimitError(`MIME nesting deeper than ${limits.maxDepth}`));
          return;
        }
        depthOf.set(data, depth);
        if (data.root) {
          root = data.headers as Headers;
          const ct = (data.headers as Headers).getFirst('content-type');
          reportType = /report-type\s*=\s*"?([a-z0-9-]+)/i.exec(ct)?.[1]?.toLowerCase() ?? null;
        }
        const type = String(data.contentType || (data.root ? 'text/plain' : '')).toLowerCase();
        if (!data.multipart && KEPT.has(type)) {
          // Only the first text/plain (a non-standard bounce's explanation) is kept.
          if (type !== 'text/plain' || !parts.some((p) => p.contentType === 'text/plain')) {
            current = { contentType: type, chunks: [], bytes: 0, encoding: String(data.encoding || '7bit').toLowerCase() };
          }
        }
      } else if (data.type === 'body' && current) {
        const cap = current.contentType === 'text/plain' ? TEXT_PART_MAX : REPORT_PART_MAX;
        // Base64 grows by a third: keep enough encoded bytes for `cap` decoded ones.
        const room = Math.ceil(cap * 1.4) - current.bytes;
        if (room > 0) {
          const chunk = (data.value as Buffer).subarray(0, room);
          current.chunks.push(chunk);
          current.bytes += chunk.length;
        }
      }
    });
    const events = splitter as unknown as EventEmitter;
    events.on('end', () => resolve());
    events.on('error', reject);
    splitter.end(raw);
  });
  close();
  return { root: root ?? new Headers(''), reportType, parts };
}

function decode(body: Buffer, encoding: string): Buffer {
  if (encoding === 'base64') return Buffer.from(body.toString('latin1').replace(/[^A-Za-z0-9+/=]/g, ''), 'base64');
  if (encoding === 'quoted-printable') {
    const s = body.toString('latin1').replace(/=\r?\n/g, '');
    return Buffer.from(s.replace(/=([0-9A-Fa-f]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16))), 'latin1');
  }
  return body;
}

/** A report part's field blocks (RFC 3464 §2.1: per-message, then one per recipient), each parsed as headers. */
function fieldBlocks(body: Buffer): Headers[] {
  return body
    .toString('utf8')
    .split(/\r?\n[ \t]*\r?\n/)
    .map((b) => b.replace(/^\s*\r?\n/, ''))
    .filter((b) => /\S/.test(b))
    .map((b) => new Headers(`${b}\r\n\r\n`));
}

/** The header block of an attached original message (message/rfc822 or text/rfc822-headers). */
function originalHeaders(s: Structure): Headers | null {
  const part = s.parts.find((p) => ['message/rfc822', 'message/global', 'text/rfc822-headers', 'message/global-headers'].includes(p.contentType));
  if (!part) return null;
  const text = part.body.toString('utf8');
  const end = text.search(/\r?\n\r?\n/);
  return new Headers(`${end < 0 ? text : text.slice(0, end)}\r\n\r\n`);
}

const value = (h: Headers | null | undefined, key: string): string => (h ? h.getFirst(key).replace(/\s+/g, ' ').trim().slice(0, HEADER_VALUE_MAX) : '');

/** `rfc822; jane@example.com` → `jane@example.com`. */
const addressOf = (v: string): string | null => {
  const a = v.replace(/^[a-z0-9-]+\s*;\s*/i, '').replace(/^<|>$/g, '').trim().toLowerCase();
  return a.includes('@') ? a.slice(0, 320) : null;
};

/** An RFC 3463 status from a Status field, or from the text of a diagnostic (`550 5.1.1 ...`, or the bare reply code). */
export function statusOf(status: string, diagnostic: string): string | null {
  const m = /\b([245])\.(\d{1,3})\.(\d{1,3})\b/.exec(status) ?? /\b([245])\.(\d{1,3})\.(\d{1,3})\b/.exec(diagnostic);
  if (m) return `${m[1]}.${m[2]}.${m[3]}`;
  const code = /(?:^|[;\s])([245])\d\d(?:[\s-]|$)/.exec(diagnostic.replace(/^[a-z-]+;/i, ' '));
  return code ? `${code[1]}.0.0` : null;
}

/** The Message-ID of ours a DSN or ARF report is about. */
function ourMessageId(s: Structure): string | null {
  const original = originalHeaders(s);
  const fromOriginal = bareMessageId(value(original, 'message-id'));
  if (fromOriginal) return fromOriginal;
  // Some MTAs quote the original only in the text: find an id of ours there.
  for (const p of s.parts) {
    if (p.contentType !== 'text/plain') continue;
    const m = /Message-ID:\s*<([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}@[^<>\s]+)>/i.exec(p.body.toString('utf8'));
    if (m) return m[1]!.toLowerCase();
  }
  return null;
}

function dsn(s: Structure, hint: AddressHint | undefined): Classified {
  const part = s.parts.find((p) => p.contentType === 'message/delivery-status' || p.contentType === 'message/global-delivery-status');
  if (!part) return { kind: 'unmatched', reason: 'delivery report without a delivery-status part' };
  const [perMessage, ...recipients] = fieldBlocks(part.body);
  const smtpId = ourMessageId(s);
  const base = identify(hint, smtpId);
  if (!base) return { kind: 'unmatched', reason: 'delivery report about no message of ours' };
  const arrival = value(perMessage, 'arrival-date');
  const items: Feedback[] = [];
  for (const r of recipients) {
    const action = value(r, 'action').toLowerCase();
    const diagnostic = value(r, 'diagnostic-code') || value(r, 'x-exim-diagnostic');
    const status = statusOf(value(r, 'status'), diagnostic);
    const at = value(r, 'last-attempt-date') || arrival;
    const common = {
      ...base, recipient: addressOf(value(r, 'final-recipient') || value(r, 'original-recipient')),
      status_code: status, diagnostic: diagnostic || null, at: parseDate(at),
    };
    if (action === 'failed') items.push({ ...common, kind: status?.startsWith('4') ? 'bounce_soft' : 'bounce_hard' });
    else if (action === 'delivered') items.push({ ...common, kind: 'delivered' });
    // `delayed` is a warning (the MTA keeps trying), `relayed`/`expanded` say nothing final.
  }
  if (items.length === 0) return { kind: 'unmatched', reason: `delivery report with no final action (${recipients.map((r) => value(r, 'action')).join(', ') || 'none'})` };
  return items;
}

const NOT_COMPLAINTS = new Set(['not-spam', 'auth-failure', 'dkim', 'dmarc']);

function arf(s: Structure, hint: AddressHint | undefined): Classified {
  const part = s.parts.find((p) => p.contentType === 'message/feedback-report');
  const fields = part ? fieldBlocks(part.body)[0] : undefined;
  const type = (value(fields, 'feedback-type') || 'abuse').toLowerCase();
  if (NOT_COMPLAINTS.has(type)) return { kind: 'unmatched', reason: `feedback report of type ${type} is not a complaint` };
  const base = identify(hint?.type === 'fbl' ? undefined : hint, ourMessageId(s));
  if (!base) return { kind: 'unmatched', reason: 'feedback report about no message of ours' };
  return [{
    ...base, kind: 'complaint', feedback_type: type.slice(0, 100),
    recipient: addressOf(value(fields, 'original-rcpt-to') || value(fields, 'removal-recipient')),
    at: parseDate(value(fields, 'arrival-date') || value(fields, 'received-date')),
  }];
}

function identify(hint: AddressHint | undefined, smtpId: string | null): Pick<Feedback, 'message_id' | 'smtp_message_id'> | null {
  if (hint && hint.type !== 'fbl') return { message_id: hint.message_id };
  if (smtpId && logIdFromMessageId(smtpId)) return { smtp_message_id: smtpId };
  return null;
}

function parseDate(v: string): string | null {
  if (!v) return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

const BOUNCE_SUBJECT = /undeliver|returned mail|delivery (status notification|failure|has failed)|failure notice|mail delivery (failed|system)|non[- ]?delivery|could not be delivered/i;
const BOUNCE_SENDER = /mailer-daemon|postmaster|mail delivery (subsystem|system)/i;

/** A bounce that is not an RFC 3464 report (qmail, old Exchange): its class from the first status or reply code in the text. */
function plainBounce(s: Structure, hint: AddressHint | undefined): Classified | null {
  const from = value(s.root, 'from');
  const subject = value(s.root, 'subject');
  const looksLikeBounce = BOUNCE_SENDER.test(from) || BOUNCE_SUBJECT.test(subject);
  if (!looksLikeBounce || hint?.type === 'reply') return null;
  const base = identify(hint?.type === 'fbl' ? undefined : hint, ourMessageId(s));
  if (!base) return { kind: 'unmatched', reason: 'bounce about no message of ours' };
  const text = s.parts.find((p) => p.contentType === 'text/plain')?.body.toString('utf8') ?? '';
  const line = /^.*\b[45]\d\d[ -]\d\.\d{1,3}\.\d{1,3}\b.*$/m.exec(text)?.[0] ?? /^.*\b[45]\.\d{1,3}\.\d{1,3}\b.*$/m.exec(text)?.[0]
    ?? /^.*\b[45]\d\d\b.*$/m.exec(text)?.[0] ?? '';
  const status = statusOf('', line);
  return [{ ...base, kind: status?.startsWith('5') ? 'bounce_hard' : 'bounce_soft', status_code: status, diagnostic: line.trim().slice(0, 1000) || subject }];
}

function autoReply(h: Headers): string | null {
  const auto = value(h, 'auto-submitted').toLowerCase();
  if (auto && auto !== 'no') return `Auto-Submitted: ${auto}`;
  if (h.hasHeader('x-autoreply') || h.hasHeader('x-autorespond')) return 'auto-responder header';
  const precedence = value(h, 'precedence').toLowerCase();
  if (precedence === 'auto_reply') return 'Precedence: auto_reply';
  return null;
}

async function reply(raw: Buffer, s: Structure, hint: AddressHint | undefined): Promise<Classified> {
  const auto = autoReply(s.root);
  if (auto) return { kind: 'unmatched', reason: `automatic reply (${auto})` };
  const inReplyTo = value(s.root, 'in-reply-to');
  const references = s.root.getFirst('references').slice(0, 20_000);
  const ids = [...`${inReplyTo} ${references}`.matchAll(/<([^<>\s]+)>/g)].map((m) => m[1]!.toLowerCase());
  const ours = ids.find((id) => logIdFromMessageId(id));
  const base = hint?.type === 'reply' ? { message_id: hint.message_id } : ours ? { smtp_message_id: ours } : null;
  if (!base) return { kind: 'unmatched', reason: 'neither a report nor a reply to a message of ours' };
  const parsed = await simpleParser(raw, { skipImageLinks: true, skipTextLinks: true, skipTextToHtml: true, maxHtmlLengthToParse: 1024 * 1024 });
  const text = (parsed.text ?? '').trim().slice(0, REPLY_TEXT_MAX);
  const headers: Record<string, string> = {};
  for (const key of ['from', 'to', 'cc', 'subject', 'date', 'message-id', 'in-reply-to', 'references']) {
    const v = value(s.root, key);
    if (v) headers[key] = key === 'subject' || key === 'from' || key === 'to' || key === 'cc' ? decodeWords(v) : v;
  }
  return [{
    ...base, kind: 'reply',
    at: parsed.date && !Number.isNaN(parsed.date.getTime()) ? parsed.date.toISOString() : null,
    reply: {
      from: parsed.from?.text?.slice(0, 500) ?? headers.from ?? '',
      subject: (parsed.subject ?? '').slice(0, 1000),
      text,
      message_id: bareMessageId(parsed.messageId ?? null),
      in_reply_to: ours ?? bareMessageId(inReplyTo),
      headers,
    },
  }];
}

function decodeWords(v: string): string {
  // mailsplit's Headers decode encoded words in getDecoded; getFirst keeps them as sent.
  try {
    const h = new Headers(`X: ${v}\r\n\r\n`);
    return (h.getDecoded('x')[0]?.value ?? v).slice(0, HEADER_VALUE_MAX);
  } catch {
    return v;
  }
}

/**
 * Classifies one inbound message. `hint` is what the recipient address said
 * (a signed return-path or reply address names the message; the feedback-loop
 * address says "a complaint"). Never throws for malformed input: a message it
 * cannot read is `unmatched` with the reason.
 */
export async function classifyMessage(raw: Buffer | Uint8Array | string, hint?: AddressHint, limits: ParseLimits = DEFAULT_PARSE_LIMITS): Promise<Classified> {
  const buf = typeof raw === 'string' ? Buffer.from(raw, 'utf8') : Buffer.isBuffer(raw) ? raw : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
  let s: Structure;
  try {
    s = await structure(buf, limits);
  } catch (err) {
    return { kind: 'unmatched', reason: `unreadable message: ${(err as Error).message}`.slice(0, 300) };
  }
  const hasPart = (t: string) => s.parts.some((p) => p.contentType === t);
  if (s.reportType === 'feedback-report' || hasPart('message/feedback-report')) return arf(s, hint);
  if (s.reportType === 'delivery-status' || s.reportType === 'global-delivery-status' || hasPart('message/delivery-status') || hasPart('message/global-delivery-status')) {
    return dsn(s, hint);
  }
  // A report to the feedback-loop address in no standard format (Microsoft's JMRP attaches the original): a complaint.
  if (hint?.type === 'fbl') {
    const base = identify(undefined, ourMessageId(s));
    return base ? [{ ...base, kind: 'complaint', feedback_type: 'abuse' }] : { kind: 'unmatched', reason: 'complaint about no message of ours' };
  }
  const bounce = plainBounce(s, hint);
  if (bounce) return bounce;
  try {
    return await reply(buf, s, hint);
  } catch (err) {
    return { kind: 'unmatched', reason: `unreadable reply: ${(err as Error).message}`.slice(0, 300) };
  }
}
