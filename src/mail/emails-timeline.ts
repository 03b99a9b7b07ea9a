// One message of the log with its timeline: what GET /email/emails/{id} answers
// and what the dashboard's message page shows, from one query path.
import type { Db } from '../db/pool.ts';
import { findEmail, trackingHits, type LogRow } from './emails-queries.ts';
import { feedbackEvents } from '../inbound/timeline.ts';

export type TimelineEvent = { type: string; at: string; detail: Record<string, unknown> };

/** The team's message with this id and its timeline, or undefined (another team's id included). */
export async function emailWithTimeline(db: Db, teamId: string, id: string): Promise<{ row: LogRow; events: TimelineEvent[] } | undefined> {
  const row = await findEmail(db, teamId, id);
  if (!row) return undefined;
  const events = timeline(row, await trackingHits(db, teamId, row.id));
  // What came back (bounce and delivery reports, complaints, replies); a bounce by report replaces the row's own bounced step.
  const feedback = await feedbackEvents(db, teamId, row.id);
  const merged = feedback.some((e) => e.type === 'bounced') ? events.filter((e) => e.type !== 'bounced') : events;
  return { row, events: [...merged, ...feedback].sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0)) };
}

/** The message's history from its row (the latest state of each step) and its tracking hits. */
export function timeline(r: LogRow, hits: Awaited<ReturnType<typeof trackingHits>>): TimelineEvent[] {
  const ev: TimelineEvent[] = [{ type: 'queued', at: r.created_at.toISOString(), detail: { source: r.source } }];
  const at = (d: Date | null) => (d ?? r.updated_at).toISOString();
  if (r.sent_at) ev.push({ type: 'sent', at: at(r.sent_at), detail: { response: r.smtp_response, attempts: r.attempts } });
  switch (r.status) {
    case 'deferred':
      ev.push({ type: 'deferred', at: at(null), detail: { reason: r.last_error, attempts: r.attempts } });
      break;
    case 'bounced_hard':
    case 'bounced_soft':
      ev.push({
        type: 'bounced', at: at(r.bounced_at),
        detail: { bounce_type: r.status === 'bounced_hard' ? 'hard' : 'soft', reason: r.last_error, attempts: r.attempts },
      });
      break;
    case 'failed':
    case 'cancelled':
    case 'suppressed':
      ev.push({ type: r.status, at: at(null), detail: { reason: r.last_error } });
      break;
  }
  for (const h of hits) {
    ev.push({
      type: h.kind === 'open' ? 'opened' : 'clicked', at: h.created_at.toISOString(),
      detail: { is_bot: h.is_bot, ...(h.url ? { url: h.url } : {}), ...(h.reasons.length ? { reasons: h.reasons } : {}) },
    });
  }
  return ev.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
}

