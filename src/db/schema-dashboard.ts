// Row types of the Dashboard users and sessions (issue 6) tables, joined into Database in schema.ts.
import type { ColumnType, Generated } from 'kysely';

type Ts = ColumnType<Date, Date | string | undefined, Date | string>;

export interface DashboardUsersTable {
  id: Generated<string>;
  team_id: string;
  email: string;
  password_hash: string | null;
  created_at: Ts;
  updated_at: Ts;
}

export interface DashboardSessionsTable {
  id: Generated<string>;
  user_id: string;
  token_hash: Buffer;
  created_at: Ts;
  expires_at: Ts;
}

export interface DashboardPasswordTokensTable {
  id: Generated<string>;
  team_id: string;
  user_id: string | null;
  token_hash: Buffer;
  created_at: Ts;
  expires_at: Ts;
  used_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

export interface ContactImportsTable {
  id: Generated<string>;
  team_id: string;
  status: Generated<'queued' | 'running' | 'done' | 'failed'>;
  file_name: string;
  file_path: string;
  bytes: ColumnType<string, number | string, number | string>;
  rows_estimate: number;
  emit_events: Generated<boolean>;
  rows_done: Generated<number>;
  rejected: Generated<number>;
  created: Generated<number>;
  updated: Generated<number>;
  unchanged: Generated<number>;
  error: string | null;
  created_at: Ts;
  finished_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

export interface DashboardTables {
  contact_imports: ContactImportsTable;
  dashboard_users: DashboardUsersTable;
  dashboard_sessions: DashboardSessionsTable;
  dashboard_password_tokens: DashboardPasswordTokensTable;
}
