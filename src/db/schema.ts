// Row types of our tables, for Kysely. One interface per table.
import type { ColumnType, Generated } from 'kysely';
import type { DashboardTables } from './schema-dashboard.ts';
import type { DkimTables } from './schema-dkim.ts';
import type { EngineTables } from './schema-engine.ts';
import type { TrackingTables } from './schema-tracking.ts';
import type { StatsTables } from './schema-stats.ts';
import type { WebhookTables } from './schema-webhooks.ts';
import type { InboundProviderTables } from './schema-inbound-providers.ts';
import type { InboundTables } from './schema-inbound.ts';

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;

export interface TeamsTable {
  id: Generated<string>;
  name: string;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface ApiKeysTable {
  id: Generated<string>;
  team_id: string;
  name: string;
  prefix: string;
  key_hash: Buffer;
  created_at: Timestamp;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

// Feature tables live in their own files (one owner each) and are joined here.
export interface Database extends Tables, EmailSendLogTables, WebhookTables, EngineTables, TrackingTables, DashboardTables, InboundTables, InboundProviderTables, DkimTables, StatsTables {
  teams: TeamsTable;
  api_keys: ApiKeysTable;
}

// Column types shared by every table file; in their own file so the table files need not import this one back.
export type { Json, NullableTs, Ts } from './column-types.ts';
import type { Json, NullableTs, Ts } from './column-types.ts';

export interface ContactsTable {
  id: Generated<string>;
  team_id: string;
  email: string;
  status: Generated<'active' | 'unsubscribed' | 'bounced' | 'complained'>;
  first_name: string | null;
  last_name: string | null;
  phone: string | null;
  foreign_id: string | null;
  country_code: string | null;
  tags: Generated<string[]>;
  is_email_valid: boolean | null;
  validation_method: string | null;
  validation_reason: string | null;
  validated_at: NullableTs;
  created_at: Ts;
  updated_at: Ts;
  unsubscribed_at: NullableTs;
  unsubscribed_reason: string | null;
  first_sent_at: NullableTs;
  last_sent_at: NullableTs;
  sent_count: Generated<number>;
  first_opened_at: NullableTs;
  last_opened_at: NullableTs;
  opens_count: Generated<number>;
  first_clicked_at: NullableTs;
  last_clicked_at: NullableTs;
  clicks_count: Generated<number>;
  first_lead_at: NullableTs;
  last_lead_at: NullableTs;
  leads_count: Generated<number>;
  first_sale_at: NullableTs;
  last_sale_at: NullableTs;
  sales_count: Generated<number>;
  first_bounced_at: NullableTs;
  last_bounced_at: NullableTs;
  hard_bounces_count: Generated<number>;
  soft_bounces_count: Generated<number>;
  custom_str_1: string | null; custom_str_2: string | null; custom_str_3: string | null; custom_str_4: string | null; custom_str_5: string | null;
  custom_int_1: number | null; custom_int_2: number | null; custom_int_3: number | null; custom_int_4: number | null; custom_int_5: number | null;
  custom_dec_1: string | null; custom_dec_2: string | null; custom_dec_3: string | null;
  custom_datetime_1: NullableTs; custom_datetime_2: NullableTs; custom_datetime_3: NullableTs;
  custom_bool_1: boolean | null; custom_bool_2: boolean | null; custom_bool_3: boolean | null;
}

export interface TemplatesTable {
  id: Generated<string>;
  team_id: string;
  name: string;
  subject: string | null;
  content_type: Generated<'html'>;
  scope: Generated<'private' | 'public'>;
  status: Generated<'active' | 'archived'>;
  meta: Json<{ json_schema: string; tags: string[] }>;
  content: string;
  alt_content: Generated<string>;
  /** 1 at create; each content change through an update adds one (0015). */
  version: Generated<number>;
  created_at: Ts;
  updated_at: Ts;
}

/** Earlier versions of a template, newest kept (0015). */
export interface TemplateVersionsTable {
  template_id: string;
  team_id: string;
  version: number;
  name: string;
  subject: string | null;
  content: string;
  alt_content: string;
  meta: Json<{ json_schema: string; tags: string[] }>;
  created_at: Ts;
  replaced_at: Generated<Date>;
}

export interface MailAccountsTable {
  id: Generated<string>;
  team_id: string;
  host: string;
  port: number;
  security: 'tls' | 'starttls' | 'none';
  username: string | null;
  password_enc: Buffer | null;
  from_email: string;
  from_name: string | null;
  daily_limit: Generated<number>;
  campaign_share_percent: Generated<number>;
  /** Messages per minute handed to SMTP (0023); null: no limit. */
  max_per_minute: Generated<number | null>;
  status: Generated<'active' | 'disabled'>;
  /** Set by a soft delete (0015): the row stays for the message log, every read leaves it out. */
  deleted_at: NullableTs;
  created_at: Ts;
  updated_at: Ts;
  /** Inbound (0019): signed per-message return path; signed Reply-To. */
  verp: Generated<boolean>;
  capture_replies: Generated<boolean>;
  /** The bounce/complaint state last announced by email.account.health (0024). */
  health_state: Generated<'ok' | 'warning' | 'critical'>;
}

export interface CampaignsTable {
  id: Generated<string>;
  team_id: string;
  name: string;
  delivery_type: Generated<string>;
  campaign_type: Generated<string>;
  meta: Json<unknown[]>;
  draft_data: Json<Record<string, unknown>>;
  trigger_events: string[];
  /** Set by a soft delete (0015): the row stays for the message log, every read leaves it out. */
  deleted_at: NullableTs;
  created_at: Ts;
  updated_at: Ts;
}

export interface CampaignSendsTable {
  id: Generated<string>;
  team_id: string;
  campaign_id: string;
  campaign_type: string;
  status: Generated<'active' | 'paused' | 'completed' | 'failed' | 'scheduled' | 'sending' | 'cancelled'>;
  next_send_at: NullableTs;
  next_send_countdown: Json<{ total: number; remaining: number }>;
  send_data: Json<Record<string, unknown>>;
  send_progress: Json<Record<string, unknown>>;
  /** Broadcasts (0023): last contact id of the recipient list written so far, whether it is complete, recipients listed. */
  list_cursor: string | null;
  list_built: Generated<boolean>;
  total_recipients: Generated<number>;
  /** Automation (0025): iterations listed, messages listed in the current one, why it paused itself, the iteration a start let past the guard. */
  current_iteration: Generated<number>;
  iteration_listed: Generated<number>;
  pause_reason: 'delivery_rate' | null;
  guard_passed_iteration: number | null;
  created_at: Ts;
  updated_at: Ts;
}

export interface EventsTable {
  id: Generated<string>;
  team_id: string;
  name: string;
  contact_id: string | null;
  payload: Json<Record<string, unknown>>;
  idempotency_key: string | null;
  occurred_at: Ts;
  created_at: Ts;
  processed_at: NullableTs;
  /** Set when the campaign decisions of a trigger event are recorded (engine.ts). */
  decided_at: NullableTs;
}

export interface Tables {
  contacts: ContactsTable;
  templates: TemplatesTable;
  template_versions: TemplateVersionsTable;
  mail_accounts: MailAccountsTable;
  campaigns: CampaignsTable;
  campaign_sends: CampaignSendsTable;
  events: EventsTable;
}

export interface EmailSendLogTable {
  id: Generated<string>;
  team_id: string;
  campaign_id: string | null;
  campaign_send_id: string | null;
  contact_id: string | null;
  event_id: string | null;
  template_id: string | null;
  mail_account_id: string | null;
  email: string;
  subject: string | null;
  message_id: string | null;
  status: Generated<'queued' | 'sending' | 'sent' | 'delivered' | 'deferred' | 'bounced_soft' | 'bounced_hard' | 'failed' | 'cancelled' | 'suppressed'>;
  source: Generated<'campaign' | 'transactional'>;
  to_name: string | null;
  render: Json<Record<string, unknown>> | null;
  claimed_at: NullableTs;
  /** A deferred message's retry is due then (0036); null: due. */
  retry_at: NullableTs;
  attempts: Generated<number>;
  open_tracking: Generated<boolean>;
  click_tracking: Generated<boolean>;
  smtp_response: string | null;
  last_error: string | null;
  queued_at: Ts;
  sent_at: NullableTs;
  bounced_at: NullableTs;
  /** Inbound feedback (0019): the relay's id from its 250 answer, and a provider's delivery report. */
  provider_message_id: string | null;
  delivered_at: NullableTs;
  first_opened_at: NullableTs;
  opens_count: Generated<number>;
  first_clicked_at: NullableTs;
  clicks_count: Generated<number>;
  /** Raw hit totals: every hit, counted or not (migration 0009). */
  open_hits_count: Generated<number>;
  click_hits_count: Generated<number>;
  created_at: Ts;
  updated_at: Ts;
}

export interface SuppressionsTable {
  id: Generated<string>;
  team_id: string;
  email: string | null;
  email_hmac: string | null;
  reason: 'unsubscribed' | 'bounced_hard' | 'soft_bounce' | 'complained' | 'manual' | 'erased';
  /** Every reason recorded for the address, strongest first (0018); `reason` is the one in force. */
  reasons: Generated<string[]>;
  message_id: string | null;
  created_at: Ts;
  updated_at: Ts;
}

export interface EmailSendLogTables {
  email_send_log: EmailSendLogTable;
  suppressions: SuppressionsTable;
}
