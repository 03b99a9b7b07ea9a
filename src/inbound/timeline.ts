// What came back about one message (message_feedback rows), as timeline events
// of the message log: bounced (by report), complained, replied, delivered.
import type { Db } from '../db/pool.ts';

export type FeedbackEvent = { type: string; at: string; detail: Record<string, unknown> };

const TYPE: Record<string, string> = { bounce_hard: 'bounced', bounce_soft: 'bounced', complaint: 'complained', reply: 'replied', delivered: 'delivered' };

/** The team's feedback rows of one message, oldest first (at most 100). */
export async function feedbackEvents(db: Db, teamId: string, logId: string): Promise<FeedbackEvent[]> {
  const rows = await db
    .selectFrom('message_feedback')
    .select(['kind', 'source', 'status_code', 'diagnostic', 'feedback_type', 'detail', 'occurred_at'])
    .where('team_id', '=', teamId)
    .where('email_send_log_id', '=', logId)
    .orderBy('occurred_at')
    .limit(100)
    .execute();
  return rows.map((r) => {
    const reply = (r.detail as { reply?: { from?: string; subject?: string; text?: string } } | null)?.reply;
    const detail: Record<string, unknown> = { source: r.source };
    if (r.kind === 'bounce_hard' || r.kind === 'bounce_soft') {
      Object.assign(detail, { bounce_type: r.kind === 'bounce_hard' ? 'hard' : 'soft', status_code: r.status_code, reason: r.diagnostic });
    }
    if (r.kind === 'complaint') detail.feedback_type = r.feedback_type;
    if (reply) Object.assign(detail, { from: reply.from, subject: reply.subject, excerpt: (reply.text ?? '').slice(0, 500) });
    return { type: TYPE[r.kind] ?? r.kind, at: new Date(r.occurred_at).toISOString(), detail };
  });
}
