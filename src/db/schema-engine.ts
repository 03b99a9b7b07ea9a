// Row types of the campaign engine tables (0005_engine.sql), joined into Database in schema.ts.
import type { Generated } from 'kysely';
import type { Ts } from './column-types.ts';

/** Why a campaign decision sent nothing (every campaign kind). */
export const SKIP_REASONS = [
  'paused', 'unsubscribed', 'bounced', 'complained', 'suppressed', 'segment_mismatch', 'cooldown', 'daily_cap',
  'no_mail_account', 'account_daily_limit', 'no_template', 'verification_valid', 'verification_risky',
  'verification_invalid', 'verification_unknown', 'verification_budget',
] as const;
export type SkipReason = (typeof SKIP_REASONS)[number];

export interface LeadsTable {
  id: Generated<string>;
  team_id: string;
  contact_id: string | null;
  /** Null once retention purged the event (0012). */
  event_id: string | null;
  source: string | null;
  campaign_id: string | null;
  campaign_send_id: string | null;
  created_at: Ts;
}

export interface SalesTable extends LeadsTable {
  amount: string | null;
  currency: string | null;
}

export interface CampaignDecisionsTable {
  id: Generated<string>;
  team_id: string;
  /** Null once retention purged the event (0012). */
  event_id: string | null;
  campaign_id: string;
  campaign_send_id: string | null;
  contact_id: string | null;
  decision: 'send' | 'skip';
  reason: SkipReason | null;
  email_send_log_id: string | null;
  decided_at: Ts;
  created_at: Ts;
  /** A broadcast's recipient-list entry (0023): unique per (campaign_send_id, contact_id). */
  list_entry: Generated<boolean>;
}

export interface CampaignRotationTable {
  campaign_send_id: string;
  team_id: string;
  template_cursor: Generated<number>;
  account_cursor: Generated<number>;
}

export interface EngineTables {
  leads: LeadsTable;
  sales: SalesTable;
  campaign_decisions: CampaignDecisionsTable;
  campaign_rotation: CampaignRotationTable;
}
