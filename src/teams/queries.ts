import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { generateApiKey } from './keys.ts';

export type ApiKeyInfo = {
  id: string;
  team_id: string;
  name: string;
  prefix: string;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
};

export async function createTeam(db: Db, name: string): Promise<{ id: string; name: string; created_at: Date }> {
  return db.insertInto('teams').values({ name }).returning(['id', 'name', 'created_at']).executeTakeFirstOrThrow();
}

export async function countTeams(db: Db): Promise<number> {
  const row = await db.selectFrom('teams').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function teamExists(db: Db, teamId: string): Promise<boolean> {
  const row = await db.selectFrom('teams').select('id').where('id', '=', teamId).executeTakeFirst();
  return row !== undefined;
}

/** Creates a key and returns it in clear text: the only time it is ever available. */
export async function createApiKey(db: Db, teamId: string, name: string): Promise<{ key: string; info: ApiKeyInfo }> {
  const { key, prefix, hash } = generateApiKey();
  const info = await db
    .insertInto('api_keys')
    .values({ team_id: teamId, name, prefix, key_hash: hash })
    .returning(['id', 'team_id', 'name', 'prefix', 'created_at', 'last_used_at', 'revoked_at'])
    .executeTakeFirstOrThrow();
  return { key, info };
}

export async function listApiKeys(db: Db, teamId: string): Promise<ApiKeyInfo[]> {
  return db
    .selectFrom('api_keys')
    .select(['id', 'team_id', 'name', 'prefix', 'created_at', 'last_used_at', 'revoked_at'])
    .where('team_id', '=', teamId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .execute();
}

/** Revokes a key; scoped to a team when one is given. Returns false when no such live key. */
export async function revokeApiKey(db: Db, keyId: string, teamId?: string): Promise<boolean> {
  let q = db.updateTable('api_keys').set({ revoked_at: sql`now()` }).where('id', '=', keyId).where('revoked_at', 'is', null);
  if (teamId) q = q.where('team_id', '=', teamId);
  const res = await q.executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

export async function findLiveKeyByHash(db: Db, hash: Buffer): Promise<{ id: string; team_id: string } | undefined> {
  return db
    .selectFrom('api_keys')
    .select(['id', 'team_id'])
    .where('key_hash', '=', hash)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
}

/** At most one write a minute per key, whatever the request rate or number of processes. */
export async function touchApiKey(db: Db, keyId: string): Promise<void> {
  await sql`UPDATE api_keys SET last_used_at = now()
            WHERE id = ${keyId} AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`.execute(db);
}
