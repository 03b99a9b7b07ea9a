// How the message page shows one timeline event (src/mail/emails-timeline.ts):
// a sentence for the kinds we know, the person-or-bot verdict of opens and
// clicks, and for every kind, known or not, its whole detail as `key: value`
// lines. A kind this file does not know (one added later) still shows, with its
// name as the sentence and its detail, so new kinds need no change here.
import type { TimelineEvent } from '../mail/emails-timeline.ts';

export type EventView = {
  at: string;
  type: string;
  /** One line saying what happened. */
  summary: string;
  /** `person` or `bot` for opens and clicks (any event whose detail says is_bot). */
  verdict: 'person' | 'bot' | null;
  /** A colour class for the badge: good, bad, warn or neutral. */
  tone: 'good' | 'bad' | 'warn' | 'neutral';
  detail: { key: string; value: string }[];
};

const text = (v: unknown): string => (typeof v === 'string' ? v : JSON.stringify(v));

// Known kinds: a sentence from the detail, and a tone.
const KNOWN: Record<string, { tone: EventView['tone']; say: (d: Record<string, unknown>) => string }> = {
  queued: { tone: 'neutral', say: (d) => `Queued${d.source ? ` (${text(d.source)})` : ''}` },
  sent: { tone: 'good', say: () => 'Accepted by the SMTP server' },
  delivered: { tone: 'good', say: () => 'Delivered to the mailbox' },
  deferred: { tone: 'warn', say: () => 'Deferred: the server asked us to try again later' },
  bounced: {
    tone: 'bad',
    say: (d) => `${d.bounce_type === 'soft' ? 'Soft' : d.bounce_type === 'hard' ? 'Hard' : 'A'} bounce${diagnostic(d) ? `: ${diagnostic(d)}` : ''}`,
  },
  opened: { tone: 'good', say: (d) => `Opened by ${who(d)}` },
  clicked: { tone: 'good', say: (d) => `Clicked${d.url ? ` ${text(d.url)}` : ''} (${who(d)})` },
  replied: { tone: 'good', say: () => 'The recipient replied' },
  complained: { tone: 'bad', say: () => 'The recipient reported it as spam' },
  unsubscribed: { tone: 'warn', say: () => 'The recipient unsubscribed' },
  failed: { tone: 'bad', say: (d) => `Could not be sent${d.reason ? `: ${text(d.reason)}` : ''}` },
  cancelled: { tone: 'neutral', say: (d) => `Cancelled before sending${d.reason ? `: ${text(d.reason)}` : ''}` },
  suppressed: { tone: 'warn', say: (d) => `Not sent: the address is suppressed${d.reason ? ` (${text(d.reason)})` : ''}` },
};

/** The server's diagnostic of a bounce, whichever key its source used. */
function diagnostic(d: Record<string, unknown>): string {
  for (const k of ['diagnostic', 'diagnostic_code', 'reason', 'status']) {
    if (typeof d[k] === 'string' && d[k]) return d[k] as string;
  }
  return '';
}

function verdictOf(d: Record<string, unknown>): EventView['verdict'] {
  return typeof d.is_bot === 'boolean' ? (d.is_bot ? 'bot' : 'person') : null;
}

const who = (d: Record<string, unknown>) =>
  verdictOf(d) === 'bot' ? `a bot${Array.isArray(d.reasons) && d.reasons.length ? ` (${d.reasons.map(text).join(', ')})` : ''}` : 'a person';

/** `email.bounced.dsn` → `Email bounced dsn`: the name of a kind we do not know, as words. */
function words(type: string): string {
  const s = type.replace(/[._-]+/g, ' ').trim();
  return s ? s[0]!.toUpperCase() + s.slice(1) : 'Event';
}

export function describeEvent(e: TimelineEvent): EventView {
  const d = e.detail ?? {};
  const known = Object.hasOwn(KNOWN, e.type) ? KNOWN[e.type] : undefined;
  return {
    at: e.at,
    type: e.type,
    summary: known ? known.say(d) : words(e.type),
    verdict: verdictOf(d),
    tone: known?.tone ?? 'neutral',
    // The detail as the API shows it, one `key: value` per line, read as text.
    detail: Object.entries(d).filter(([, v]) => v !== null && v !== undefined).map(([key, v]) => ({ key, value: text(v) })),
  };
}
