// Row types of the webhook tables (migration 0003), joined into Database in schema.ts.
import type { ColumnType, Generated } from 'kysely';
import type { Json, NullableTs, Ts } from './column-types.ts';

export interface WebhooksTable {
  id: Generated<string>;
  team_id: string;
  url: string;
  events: string[];
  secret_enc: Buffer;
  is_enabled: Generated<boolean>;
  source: string | null;
  description: string | null;
  disabled_reason: string | null;
  last_success_at: NullableTs;
  /** First failed attempt since the last success (auto-disable, 0012). */
  failing_since: NullableTs;
  last_failure_at: NullableTs;
  failures_since_success: Generated<number>;
  /** Set when the service disabled the webhook for failing; cleared on enable. */
  auto_disabled_at: NullableTs;
  created_at: Ts;
  updated_at: Ts;
}

export type AttemptLogEntry = { at: string; response_code: number | null; duration_ms: number; error: string | null };

export interface WebhookDeliveriesTable {
  id: string;
  team_id: string;
  webhook_id: string;
  event_id: string | null;
  /** The contact of its event, for the contact timeline (0022). */
  contact_id: Generated<string | null>;
  event: string;
  payload: Json<Record<string, unknown>> | null;
  status: Generated<'pending' | 'success' | 'failed'>;
  attempts: Generated<number>;
  sequence_attempts: Generated<number>;
  max_attempts: Generated<number>;
  attempted_at: ColumnType<Date[], Date[] | undefined, Date[]>;
  attempt_log: Json<AttemptLogEntry[]>;
  response_code: number | null;
  response_body: string | null;
  last_error: string | null;
  next_attempt_at: NullableTs;
  locked_until: NullableTs;
  /** Made by POST /webhooks/simulate (0015). */
  simulated: Generated<boolean>;
  created_at: Ts;
  updated_at: Ts;
}

export interface WebhookTables {
  webhooks: WebhooksTable;
  webhook_deliveries: WebhookDeliveriesTable;
}
