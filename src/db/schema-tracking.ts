// Row types of the Tracking and bot decisions (issue 5) tables, joined into Database in schema.ts.
import type { ColumnType, Generated } from 'kysely';

type Ts = ColumnType<Date, Date | string | undefined, Date | string>;

export interface TrackingHitsTable {
  id: Generated<string>;
  team_id: string;
  email_send_log_id: string;
  contact_id: string | null;
  kind: 'open' | 'click' | 'honeypot';
  method: string;
  url: string | null;
  ip: string | null;
  user_agent: string | null;
  is_bot: boolean;
  bot_score: number;
  reasons: Generated<string[]>;
  fingerprint: string | null;
  event_id: string | null;
  created_at: Ts;
}

/** When a (message, kind, link, verdict) last counted: hits within the hour after it do not. */
export interface TrackingCountedTable {
  email_send_log_id: string;
  team_id: string;
  kind: 'open' | 'click' | 'honeypot';
  link: string;
  is_bot: boolean;
  counted_at: Ts;
}

export interface TrackingTables {
  tracking_hits: TrackingHitsTable;
  tracking_counted: TrackingCountedTable;
}
