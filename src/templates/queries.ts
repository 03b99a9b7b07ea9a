// SQL of the templates feature, one function per operation; every query is
// scoped to one team.
import { escapeLike } from '../lib/text.ts';
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { paginate } from '../lib/paginate.ts';

export type TemplateMeta = { json_schema: string; tags: string[] };

export type TemplateRow = {
  id: string;
  team_id: string;
  name: string;
  subject: string | null;
  content_type: 'html';
  scope: 'private' | 'public';
  status: 'active' | 'archived';
  meta: TemplateMeta;
  version: number;
  content?: string;
  alt_content?: string;
  created_at: Date;
  updated_at: Date;
};

const SUMMARY = ['id', 'team_id', 'name', 'subject', 'content_type', 'scope', 'status', 'meta', 'version', 'created_at', 'updated_at'] as const;
const FULL = [...SUMMARY, 'content', 'alt_content'] as const;
/** Every column a template is shown with, its content included. */
export const FULL_COLUMNS = FULL;
/**
 * What a write returns: every column but the content, which the caller has
 * just written (up to 1 MiB of content and its text version would otherwise
 * go to the database and come back, decoded on the event loop).
 */
export const WRITTEN_COLUMNS = SUMMARY;

export type NewTemplate = {
  name: string;
  subject: string | null;
  content: string;
  alt_content: string;
  meta: TemplateMeta;
};

export async function insertTemplate(db: Db, teamId: string, t: NewTemplate): Promise<Required<TemplateRow>> {
  return db
    .insertInto('templates')
    .values({
      team_id: teamId,
      name: t.name,
      subject: t.subject,
      content: t.content,
      alt_content: t.alt_content,
      meta: JSON.stringify(t.meta),
    })
    .returning(WRITTEN_COLUMNS)
    .executeTakeFirstOrThrow()
    .then((row) => ({ ...row, content: t.content, alt_content: t.alt_content }));
}

export async function findTemplate(db: Db, teamId: string, id: string): Promise<Required<TemplateRow> | undefined> {
  return db.selectFrom('templates').select(FULL).where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
}

export async function listTemplates(
  db: Db,
  teamId: string,
  opts: { page: number; perPage: number; search?: string; withContent: boolean },
): Promise<{ rows: TemplateRow[]; total: number }> {
  let base = db.selectFrom('templates').where('team_id', '=', teamId).where('status', '=', 'active');
  if (opts.search) base = base.where(sql<boolean>`name ILIKE ${`%${escapeLike(opts.search)}%`}`);

  return paginate(
    opts,
    async () => (await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n,
    (limit, offset) => base.select(opts.withContent ? FULL : SUMMARY).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset).execute(),
  );
}

/**
 * Deletes a template unless a running campaign uses it. Returns 'not_found',
 * 'in_use' or 'deleted'.
 *
 * The template row is locked first (FOR UPDATE), so a campaign created at the
 * same moment either committed before the check (and is seen by it: 'in_use')
 * or waits on the lock when it locks the templates it names (FOR SHARE) and
 * then finds the template gone.
 */
export async function deleteTemplate(db: Db, teamId: string, id: string): Promise<'not_found' | 'in_use' | 'deleted'> {
  return db.transaction().execute(async (tx) => {
    const row = await tx
      .selectFrom('templates')
      .select('id')
      .where('team_id', '=', teamId)
      .where('id', '=', id)
      .forUpdate()
      .executeTakeFirst();
    if (!row) return 'not_found';
    // A campaign is running when its latest send is active or paused.
    const inUse = await sql<{ one: number }>`
      SELECT 1 AS one
      FROM campaigns c
      CROSS JOIN LATERAL (
        SELECT s.status, s.send_data FROM campaign_sends s
        WHERE s.campaign_id = c.id
        ORDER BY s.created_at DESC, s.id DESC
        LIMIT 1
      ) latest
      WHERE c.team_id = ${teamId}
        AND c.deleted_at IS NULL
        AND latest.status IN ('active', 'paused')
        AND latest.send_data -> 'template_ids' @> jsonb_build_array(${row.id}::text)
      LIMIT 1`.execute(tx);
    if (inUse.rows.length > 0) return 'in_use';
    await tx.deleteFrom('templates').where('team_id', '=', teamId).where('id', '=', row.id).execute();
    return 'deleted';
  });
}
