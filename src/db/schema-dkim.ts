// Row types of the DKIM keys table (issue 14), joined into Database in schema.ts.
import type { Generated } from 'kysely';
import type { NullableTs, Ts } from './column-types.ts';

export interface DkimKeysTable {
  id: Generated<string>;
  team_id: string;
  mail_account_id: string;
  algorithm: 'rsa' | 'ed25519';
  domain: string;
  selector: string;
  public_key: string;
  private_key_enc: Buffer;
  status: Generated<'pending' | 'active' | 'retired'>;
  created_at: Ts;
  activated_at: NullableTs;
  retired_at: NullableTs;
}

export interface DkimTables {
  dkim_keys: DkimKeysTable;
}
