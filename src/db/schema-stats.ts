// Row types of the mail statistics tables (migration 0024), joined into Database in schema.ts.
import type { ColumnType, Generated } from 'kysely';

type Ts = ColumnType<Date, Date | string, Date | string>;
type Count = ColumnType<number, number | undefined, number>;

/** The counted keys, in the order the stats routes answer them. */
export const STATS_KEYS = [
  'sent', 'delivered', 'bounced_hard', 'bounced_soft', 'deferred', 'opened_human', 'opened_bot',
  'clicked_human', 'clicked_bot', 'unsubscribed', 'complained', 'replied',
] as const;
export type StatsKey = (typeof STATS_KEYS)[number];

type Counts = { [K in StatsKey]: Count };

export interface StatsDeltasTable extends Counts {
  id: Generated<string>;
  team_id: string;
  source: 'campaign' | 'transactional';
  campaign_id: string | null;
  mail_account_id: string | null;
  bucket: Ts;
}

export interface StatsBucketsTable extends Counts {
  team_id: string;
  source: 'campaign' | 'transactional';
  campaign_id: string | null;
  mail_account_id: string | null;
  bucket: Ts;
}

export interface StatsTables {
  stats_deltas: StatsDeltasTable;
  stats_buckets: StatsBucketsTable;
}
