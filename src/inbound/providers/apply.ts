// Provider events → the feedback core (src/inbound/feedback.ts), which matches
// them to messages (by the relay's id or our Message-ID, limited to the
// webhook's team), records each once and has every effect: message status,
// contact status, suppression, webhook events.
import type { Db } from '../../db/pool.ts';
import { applyFeedback, type Feedback, type FeedbackOptions } from '../feedback.ts';
import type { ProviderFeedback } from './events.ts';

export type ApplyProviderFeedback = (
  db: Db,
  teamId: string,
  items: ProviderFeedback[],
  opts?: FeedbackOptions,
) => Promise<{ matched: number; unmatched: number }>;

export function toFeedback(teamId: string, item: ProviderFeedback): Feedback {
  return {
    team_id: teamId,
    kind: item.kind,
    smtp_message_id: item.message_id,
    provider_message_id: item.provider_message_id,
    recipient: item.recipient,
    status_code: item.status,
    diagnostic: item.diagnostic,
    feedback_type: item.feedback_type,
    at: item.occurred_at,
    source: item.source,
  };
}

/** Duplicates (a provider's retry of an event already applied) count as matched: they found their message. */
export const applyProviderFeedback: ApplyProviderFeedback = async (db, teamId, items, opts) => {
  if (items.length === 0) return { matched: 0, unmatched: 0 };
  const result = await applyFeedback(db, items.map((item) => toFeedback(teamId, item)), opts);
  return { matched: result.applied + result.duplicates, unmatched: result.unmatched };
};
