// What every source of mail that comes back hands to applyFeedback
// (feedback.ts), and the Message-ID helpers its parsers share. A module of its
// own, free of the database and the metrics, so the untrusted pool's threads
// that parse inbound mail (parse.ts) load only this, not feedback.ts and what
// it imports (that import was about 450 ms of each thread's boot).

import { UUID_RE } from '../lib/uuid.ts';

/** Characters of a reply's text kept. */
export const REPLY_TEXT_MAX = 16 * 1024;

export type FeedbackKind = 'bounce_hard' | 'bounce_soft' | 'complaint' | 'reply' | 'delivered';

export type ReplyInfo = {
  /** The reply's From header. */
  from: string;
  subject: string;
  /** The reply's text, cut to REPLY_TEXT_MAX characters. */
  text: string;
  /** The reply's own Message-ID (without angle brackets), if it had one. */
  message_id?: string | null;
  /** Our Message-ID it answers (In-Reply-To or References). */
  in_reply_to?: string | null;
  /** A few of the reply's headers (from, to, subject, date, message-id, in-reply-to, references). */
  headers?: Record<string, string>;
};

export type Feedback = {
  /** Set when the source knows the team: the match is limited to it. */
  team_id?: string | null;
  /** Our send-log id (email_send_log.id). */
  message_id?: string | null;
  /** Our Message-ID header, with or without angle brackets. */
  smtp_message_id?: string | null;
  /** The id the relay returned in its 250 answer. */
  provider_message_id?: string | null;
  /** The recipient the report is about (DSN Final-Recipient, ARF Original-Rcpt-To); informative. */
  recipient?: string | null;
  kind: FeedbackKind;
  /** RFC 3463 status (`5.1.1`) or the provider's code. */
  status_code?: string | null;
  /** What the remote server said (`smtp; 550 5.1.1 User unknown`). */
  diagnostic?: string | null;
  /** ARF Feedback-Type (`abuse`, `fraud`...) or the provider's complaint type. */
  feedback_type?: string | null;
  /** When it happened (ISO 8601 or a Date); default: now. */
  at?: string | Date | null;
  /** Where it came from: `smtp`, `imap`, `ses`, `sendgrid`, `postmark`, `mailgun`... (default `smtp`). */
  source?: string;
  /** A reference to the raw report (a provider event id, an IMAP uid); stored, never parsed. */
  raw_ref?: string | null;
  reply?: ReplyInfo;
};

/** `<id@host>` or `id@host` → `id@host` (lower-cased, as it is compared). */
export function bareMessageId(v: string | null | undefined): string | null {
  if (!v) return null;
  const m = /<([^<>\s]{1,995})>/.exec(v) ?? /^\s*([^<>\s]{1,995})\s*$/.exec(v);
  return m ? m[1]!.toLowerCase() : null;
}

/** The send-log id inside one of our Message-IDs (`<send-log id>@domain`), or null. */
export function logIdFromMessageId(v: string | null | undefined): string | null {
  const bare = bareMessageId(v);
  if (!bare) return null;
  const local = bare.slice(0, bare.lastIndexOf('@'));
  return UUID_RE.test(local) ? local : null;
}
