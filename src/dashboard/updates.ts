// Changes the dashboard's edit pages make, until the API's own update functions
// exist: each one statement, scoped by team; undefined when the row is not the team's.
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { prepareCampaign } from '../campaigns/create.ts';
import type { CreateCampaignInput } from '../campaigns/schemas.ts';

/** A new version of a template: campaigns render it by (id, updated_at), so they send the new text from now on. */
export async function saveTemplateEdit(
  db: Db,
  teamId: string,
  id: string,
  t: { name: string; subject: string | null; content: string; alt_content: string },
): Promise<{ id: string } | undefined> {
  return db
    .updateTable('templates')
    .set({ ...t, updated_at: sql`greatest(now(), updated_at + interval '1 millisecond')` })
    .where('team_id', '=', teamId)
    .where('id', '=', id)
    .returning('id')
    .executeTakeFirst();
}

/** Disables or enables a mail account. A disabled account sends nothing: its queued mail is cancelled at send time and campaigns skip it. */
export async function setMailAccountStatus(db: Db, teamId: string, id: string, status: 'active' | 'disabled'): Promise<{ id: string } | undefined> {
  return db
    .updateTable('mail_accounts')
    .set({ status, updated_at: sql`now()` })
    .where('team_id', '=', teamId)
    .where('id', '=', id)
    .returning('id')
    .executeTakeFirst();
}

/**
 * Changes an event-triggered campaign: name, templates, mail accounts, events,
 * sender fields, tracking and limits, checked like a new campaign's
 * (prepareCampaign). The latest send takes the new settings, so the next
 * decision uses them; its status and progress stay. Segment rules the form does
 * not show are kept. Undefined when the campaign is not the team's.
 */
export async function saveCampaignEdit(db: Db, teamId: string, id: string, body: CreateCampaignInput): Promise<{ id: string } | undefined> {
  return db.transaction().execute(async (trx) => {
    const campaign = await trx.selectFrom('campaigns').select('id').where('team_id', '=', teamId).where('id', '=', id).forUpdate().executeTakeFirst();
    if (!campaign) return undefined;
    const latest = await trx
      .selectFrom('campaign_sends')
      .select(['id', 'send_data'])
      .where('team_id', '=', teamId)
      .where('campaign_id', '=', id)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .forUpdate()
      .executeTakeFirst();
    const rules = (latest?.send_data as { segment_query?: { rules?: unknown[] } } | undefined)?.segment_query?.rules ?? [];
    const { name, events, sendData } = await prepareCampaign(trx, teamId, { ...body, segment_query: body.segment_query ?? { rules } });
    const json = JSON.stringify(sendData);
    await trx
      .updateTable('campaigns')
      .set({
        name,
        trigger_events: events,
        draft_data: sql`jsonb_set(coalesce(draft_data, '{}'::jsonb), '{send_data}', ${json}::jsonb)`,
        updated_at: sql`now()`,
      })
      .where('team_id', '=', teamId)
      .where('id', '=', id)
      .execute();
    if (latest) {
      await trx.updateTable('campaign_sends').set({ send_data: json, updated_at: sql`now()` }).where('id', '=', latest.id).execute();
    }
    return campaign;
  });
}
