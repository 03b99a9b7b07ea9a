// Campaign rows written directly with SQL, for the delete-conflict tests
// (the templates feature only reads them).
import { sql } from 'kysely';
import type { Db } from '../../src/db/pool.ts';

/** A campaign whose sends have the given statuses, oldest first, each naming these template ids. */
export async function insertCampaign(db: Db, teamId: string, templateIds: string[], statuses: string[]): Promise<string> {
  const sendData = JSON.stringify({ template_ids: templateIds, mail_account_ids: [] });
  const { rows } = await sql<{ id: string }>`
    INSERT INTO campaigns (team_id, name, draft_data, trigger_events)
    VALUES (${teamId}, 'c', ${sendData}::jsonb, ARRAY['contact.saved'])
    RETURNING id`.execute(db);
  const campaignId = rows[0].id;
  for (const [i, status] of statuses.entries()) {
    await sql`
      INSERT INTO campaign_sends (team_id, campaign_id, campaign_type, status, send_data, created_at)
      VALUES (${teamId}, ${campaignId}, 'event_triggered', ${status}, ${sendData}::jsonb,
              now() - make_interval(mins => ${statuses.length - i}))`.execute(db);
  }
  return campaignId;
}
