// Row types of our tables, for Kysely. One interface per table.
import type { ColumnType, Generated } from 'kysely';

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

export interface Database {
  teams: TeamsTable;
  api_keys: ApiKeysTable;
}
