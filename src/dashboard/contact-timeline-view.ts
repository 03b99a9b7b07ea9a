// How the contact page's timeline shows one item of the contact timeline
// (contacts/timeline.ts): a sentence per type (a campaign decision with its
// reason in the campaign page's words, an open or click with the bot verdict
// and its signals), and the item's whole detail as `key: value` lines. A type
// this file does not know still shows, with its name and its detail.
import type { TimelineItem } from '../contacts/timeline.ts';
import { reasonInWords } from './decision-reasons.ts';

export type ItemView = {
  at: string;
  type: string;
  summary: string;
  verdict: 'person' | 'bot' | null;
  tone: 'good' | 'bad' | 'warn' | 'neutral';
  /** The message the item is about, for a link to its page. */
  message: string | null;
  detail: { key: string; value: string }[];
};

type D = Record<string, unknown>;
const text = (v: unknown): string => (typeof v === 'string' ? v : JSON.stringify(v));
const signals = (d: D) => (Array.isArray(d.signals) && d.signals.length ? ` (${d.signals.map(text).join(', ')})` : '');
const who = (d: D) => (d.is_bot === true ? `a bot${signals(d)}` : 'a person');

const KNOWN: Record<string, { tone: ItemView['tone']; say: (d: D) => string }> = {
  contact_saved: { tone: 'neutral', say: () => 'Contact saved' },
  unsubscribed: { tone: 'warn', say: (d) => `Unsubscribed${d.method ? ` (${text(d.method)})` : ''}${d.reason ? `: ${text(d.reason)}` : ''}` },
  event: { tone: 'neutral', say: (d) => `Event ${text(d.name ?? '')}` },
  decision: {
    tone: 'neutral',
    say: (d) => {
      const campaign = `campaign “${text(d.campaign_name ?? d.campaign_id ?? '?')}”`;
      if (d.decision === 'send') return `Sent by ${campaign}${d.event_name ? ` on ${text(d.event_name)}` : ''}`;
      return `Not sent by ${campaign}: ${reasonInWords(typeof d.reason === 'string' ? d.reason : null) ?? 'no reason recorded'}`;
    },
  },
  message_queued: { tone: 'neutral', say: (d) => `Message queued${d.subject ? `: ${text(d.subject)}` : ''} (now ${text(d.status)})` },
  message_suppressed: { tone: 'warn', say: () => 'Message not sent: the address is suppressed' },
  message_sent: { tone: 'good', say: () => 'Message accepted by the SMTP server' },
  message_deferred: { tone: 'warn', say: () => 'Message deferred: the server asked us to try again later' },
  message_bounced: { tone: 'bad', say: (d) => `Message bounced (${text(d.bounce_type ?? '?')})${d.bounce_reason ? `: ${text(d.bounce_reason)}` : ''}` },
  message_delivered: { tone: 'good', say: () => 'Message delivered to the mailbox' },
  message_complained: { tone: 'bad', say: () => 'The recipient reported the message as spam' },
  message_replied: { tone: 'good', say: () => 'The recipient replied' },
  message_failed: { tone: 'bad', say: (d) => `Message could not be sent${d.reason ? `: ${text(d.reason)}` : ''}` },
  message_cancelled: { tone: 'neutral', say: () => 'Message cancelled before sending' },
  opened: { tone: 'good', say: (d) => `Opened by ${who(d)}` },
  clicked: { tone: 'good', say: (d) => `Clicked${d.url ? ` ${text(d.url)}` : ''} by ${who(d)}` },
  suppressed: { tone: 'warn', say: (d) => `Address suppressed (${text(d.reason)})` },
  webhook: { tone: 'neutral', say: (d) => `Webhook ${text(d.event)}: ${text(d.status)}` },
};

export function describeItem(item: TimelineItem): ItemView {
  const d = item.detail ?? {};
  const known = Object.hasOwn(KNOWN, item.type) ? KNOWN[item.type] : undefined;
  return {
    at: item.at,
    type: item.type,
    summary: known ? known.say(d) : item.type,
    verdict: typeof d.is_bot === 'boolean' ? (d.is_bot ? 'bot' : 'person') : null,
    tone: known?.tone ?? 'neutral',
    message: typeof d.email_send_log_id === 'string' ? d.email_send_log_id : null,
    detail: Object.entries(d).filter(([, v]) => v !== null && v !== undefined).map(([key, v]) => ({ key, value: text(v) })),
  };
}
