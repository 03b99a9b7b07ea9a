// Row types of the feedback tables (0019_inbound_feedback.sql), joined into Database in schema.ts.
import type { Generated } from 'kysely';
import type { Json, Ts } from './column-types.ts';

export type FeedbackKindColumn = 'bounce_hard' | 'bounce_soft' | 'complaint' | 'reply' | 'delivered';

export interface MessageFeedbackTable {
  id: Generated<string>;
  team_id: string;
  email_send_log_id: string;
  contact_id: string | null;
  email: string;
  kind: FeedbackKindColumn;
  dedup_key: string;
  source: string;
  status_code: string | null;
  diagnostic: string | null;
  feedback_type: string | null;
  detail: Json<Record<string, unknown>> | null;
  raw_ref: string | null;
  occurred_at: Ts;
  created_at: Generated<Ts>;
}

export interface InboundTables {
  message_feedback: MessageFeedbackTable;
}
