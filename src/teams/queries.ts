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

function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** A team's name: 1 to 200 characters after trimming, no control characters (it is shown to recipients). */
export function teamNameProblem(name: string): string | null {
  if (name.length < 1 || name.length > 200) return 'must be 1 to 200 characters';
  if (hasControlCharacter(name)) return 'must not contain control characters (line breaks, tabs, NUL)';
  return null;
}

/** Renames a team; false when there is no such team. Recipients read the name on the unsubscribe page. */
export async function renameTeam(db: Db, teamId: string, name: string): Promise<boolean> {
  const res = await db.updateTable('teams').set({ name, updated_at: sql`now()` }).where('id', '=', teamId).executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

export type TeamSummary = { id: string; name: string; created_at: Date; api_keys: number; users: number };

/** Every team with its live API keys and dashboard users, oldest first (an installation has few teams). */
export async function listTeams(db: Db, limit = 10_000): Promise<TeamSummary[]> {
  const { rows } = await sql<TeamSummary>`
    SELECT t.id, t.name, t.created_at,
           (SELECT count(*) FROM api_keys k WHERE k.team_id = t.id AND k.revoked_at IS NULL)::int AS api_keys,
           (SELECT count(*) FROM dashboard_users u WHERE u.team_id = t.id)::int AS users
      FROM teams t
     ORDER BY t.created_at, t.id
     LIMIT ${limit}`.execute(db);
  return rows;
}

export async function findTeam(db: Db, teamId: string): Promise<{ id: string; name: string; created_at: Date } | undefined> {
  return db.selectFrom('teams').select(['id', 'name', 'created_at']).where('id', '=', teamId).executeTakeFirst();
}
