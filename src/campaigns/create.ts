// Creating an event-triggered campaign from a schema-valid body: the checks the
// schema cannot make (blank name, header line breaks, the same id in two
// spellings, segment rules, templates and mail accounts that are active and the
// team's own) and the insert, in one transaction. Shared by the API route and
// the dashboard's form, so both refuse the same input with the same messages.
import type { Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { getCampaign, insertEventCampaign, lockActiveMailAccountIds, lockActiveTemplateIds } from './queries.ts';
import type { CampaignValue, CreateCampaignInput, SendDataValue, TriggerEvent } from './schemas.ts';
import { duplicateIds } from './manage.ts';
import { checkSegmentRules } from './segment.ts';
import { scheduleBroadcast } from './broadcast.ts';
import { scheduleIteration } from './automation.ts';
import { buildSendData, canonicalUuid, normalizeEvents, scheduleDetails } from './send-data.ts';

/**
 * Checks a schema-valid body inside the caller's transaction (templates and
 * accounts are locked FOR SHARE until it commits) and builds what is stored.
 * Throws 422 VALIDATION_FAILED ('invalid campaign') listing every problem.
 */
export async function prepareCampaign(
  trx: Transaction<Database>,
  teamId: string,
  body: CreateCampaignInput,
): Promise<{ name: string; events: TriggerEvent[]; sendData: SendDataValue }> {
  const details: ErrorDetail[] = [];
  const name = body.name.trim();
  if (!name) details.push({ field: 'name', message: 'must not be blank' });
  for (const field of ['from_name', 'reply_to_name'] as const) {
    if (/[\r\n]/.test(body[field] ?? '')) details.push({ field, message: 'must not contain line breaks' });
  }
  // The schema refuses exact repeats; these catch the same id in two spellings.
  const templateIds = body.template_ids.map(canonicalUuid);
  const mailAccountIds = body.mail_account_ids.map(canonicalUuid);
  details.push(...duplicateIds(templateIds, 'template_ids'), ...duplicateIds(mailAccountIds, 'mail_account_ids'));
  const broadcast = body.campaign_type === 'broadcast';
  const automation = body.campaign_type === 'automation';
  const listed = broadcast || automation;
  if (!listed && !body.events) details.push({ field: 'events', message: 'is required' });
  if (listed && body.events) details.push({ field: 'events', message: `a${automation ? 'n automation' : ' broadcast'} has no trigger events` });
  if (!broadcast && body.broadcast_send) details.push({ field: 'broadcast_send', message: 'only a broadcast takes broadcast_send' });
  if (!automation && body.automation_send) details.push({ field: 'automation_send', message: 'only an automation takes automation_send' });
  if (automation && !body.automation_send) details.push({ field: 'automation_send', message: 'is required (iteration_send_amount and send_interval)' });
  const events = listed ? [] : normalizeEvents(body.events ?? []);
  details.push(...checkSegmentRules(body.segment_query?.rules ?? []));
  details.push(...scheduleDetails(body));

  const templates = await lockActiveTemplateIds(trx, teamId, templateIds);
  const accounts = await lockActiveMailAccountIds(trx, teamId, mailAccountIds);
  templateIds.forEach((id, i) => {
    if (!templates.has(id)) details.push({ field: `template_ids[${i}]`, message: `no active template ${id} in this team` });
  });
  mailAccountIds.forEach((id, i) => {
    if (!accounts.has(id)) details.push({ field: `mail_account_ids[${i}]`, message: `no active mail account ${id} in this team` });
  });
  if (details.length > 0) throw validationFailed(details, 'invalid campaign');
  return { name, events, sendData: buildSendData({ templateIds, mailAccountIds, events, input: body }) };
}

/** Throws 422 VALIDATION_FAILED ('invalid campaign') listing every problem; nothing is written then. */
export async function createEventCampaign(db: Db, teamId: string, body: CreateCampaignInput): Promise<CampaignValue> {
  return db.transaction().execute(async (trx) => {
    const { name, events, sendData } = await prepareCampaign(trx, teamId, body);
    const kind = body.campaign_type ?? 'event_triggered';
    const { campaignId: id, sendId } = await insertEventCampaign(trx, { teamId, name, events, sendData, kind });
    if (kind === 'broadcast') {
      const at = sendData.broadcast_send.scheduled_send_time;
      await scheduleBroadcast(trx, sendId, at ? new Date(at) : null);
    } else if (kind === 'automation') {
      const at = sendData.automation_send.scheduled_send_time;
      await scheduleIteration(trx, sendId, at ? new Date(at) : null);
    }
    return (await getCampaign(trx, teamId, id))!;
  });
}
