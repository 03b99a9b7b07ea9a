// Row types of provider event webhooks and IMAP mailboxes (issue 14, migration 0020), joined into Database in schema.ts.
import type { ColumnType, Generated } from 'kysely';
import type { NullableTs, Ts } from './column-types.ts';

export type ProviderName = 'ses' | 'sendgrid' | 'postmark' | 'mailgun';

export interface ProviderWebhooksTable {
  id: Generated<string>;
  team_id: string;
  provider: ProviderName;
  description: string | null;
  token_hash: Buffer;
  token_enc: Buffer;
  secret_enc: Buffer | null;
  sns_topic_arn: string | null;
  events_received: ColumnType<number, number | undefined, number>;
  events_unmatched: ColumnType<number, number | undefined, number>;
  last_event_at: NullableTs;
  created_at: Ts;
  updated_at: Ts;
}

export interface MailAccountImapTable {
  mail_account_id: string;
  team_id: string;
  host: string;
  port: number;
  security: 'tls' | 'starttls' | 'none';
  username: string;
  password_enc: Buffer;
  folder: Generated<string>;
  next_poll_at: Ts;
  last_polled_at: NullableTs;
  last_error: string | null;
  failures: Generated<number>;
  messages_processed: ColumnType<number, number | undefined, number>;
  created_at: Ts;
  updated_at: Ts;
}

export interface InboundProviderTables {
  provider_webhooks: ProviderWebhooksTable;
  mail_account_imap: MailAccountImapTable;
}
