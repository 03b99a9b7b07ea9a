// Update and delete of campaigns, for the API and the dashboard alike. Errors
// are the domain errors of lib/errors.ts (404, 409, 422): each caller maps
// them to its own answer.
import { sql } from 'kysely';
import { Type } from 'typebox';
import type { Db } from '../db/pool.ts';
import { AppError, notFound, validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { scheduleBroadcast } from './broadcast.ts';
import { scheduleIteration } from './automation.ts';
import { bodyChecker, compileBodyValidator, dateTimeValue } from '../http/schemas.ts';
import { getCampaign, lockActiveMailAccountIds, lockActiveTemplateIds } from './queries.ts';
import { UpdateCampaignBody, type CampaignValue, type SendDataValue, type UpdateCampaignInput } from './schemas.ts';
import { automationSendData, canonicalUuid, normalizeEvents, scheduleDetails, verificationData } from './send-data.ts';
import { checkSegmentRules } from './segment.ts';

const checkPatch = bodyChecker(UpdateCampaignBody);
const isEmailAddress = compileBodyValidator(Type.String({ format: 'email' }));

/** A repeated id (the schema refuses exact repeats; this catches the same id in two spellings). */
export function duplicateIds(ids: string[], field: string): ErrorDetail[] {
  const first = new Map<string, number>();
  const out: ErrorDetail[] = [];
  ids.forEach((id, i) => {
    const j = first.get(id);
    if (j === undefined) first.set(id, i);
    else out.push({ field: `${field}[${i}]`, message: `repeats ${field}[${j}] (${id})` });
  });
  return out;
}

/**
 * Updates a campaign of the team with the rules of create: a blank name, line
 * breaks in header fields, repeated ids, segment rules, and ids that are not
 * active templates or mail accounts of the team are 422 (every problem
 * listed), and nothing is written. The campaign's latest send takes the new
 * settings, so the next trigger is decided with them; messages already queued
 * keep their template and account (the template's content is read when a
 * message goes out, so a template update reaches them). Throws 404 for an
 * unknown or deleted campaign, or another team's.
 */
export async function updateCampaign(db: Db, teamId: string, id: string, input: unknown): Promise<CampaignValue> {
  const patch: UpdateCampaignInput = checkPatch(input);
  const details: ErrorDetail[] = [];
  const name = patch.name?.trim();
  if (name === '') details.push({ field: 'name', message: 'must not be blank' });
  for (const field of ['from_name', 'reply_to_name'] as const) {
    if (/[\r\n]/.test(patch[field] ?? '')) details.push({ field, message: 'must not contain line breaks' });
  }
  if (patch.reply_to_email && !isEmailAddress(patch.reply_to_email)) {
    details.push({ field: 'reply_to_email', message: 'must be an e-mail address, empty or null' });
  }
  const templateIds = patch.template_ids?.map(canonicalUuid);
  const mailAccountIds = patch.mail_account_ids?.map(canonicalUuid);
  if (templateIds) details.push(...duplicateIds(templateIds, 'template_ids'));
  if (mailAccountIds) details.push(...duplicateIds(mailAccountIds, 'mail_account_ids'));
  const events = patch.events ? normalizeEvents(patch.events) : undefined;
  if (patch.segment_query) details.push(...checkSegmentRules(patch.segment_query.rules));

  return db.transaction().execute(async (trx) => {
    // The campaign row is locked: two updates at once apply one after the other, each to the other's result.
    const { rows } = await sql<{ send_id: string | null; send_data: SendDataValue | null; send_status: string | null; campaign_type: string }>`
      SELECT s.id AS send_id, s.send_data, s.status AS send_status, c.campaign_type
        FROM campaigns c
        LEFT JOIN LATERAL (SELECT id, send_data, status FROM campaign_sends s
                            WHERE s.campaign_id = c.id AND s.team_id = c.team_id
                            ORDER BY s.created_at DESC, s.id DESC LIMIT 1) s ON true
       WHERE c.team_id = ${teamId} AND c.id = ${id} AND c.deleted_at IS NULL
       FOR UPDATE OF c`.execute(trx);
    const current = rows[0];
    if (!current) throw notFound('campaign');
    if (templateIds) {
      const found = await lockActiveTemplateIds(trx, teamId, templateIds);
      templateIds.forEach((t, i) => {
        if (!found.has(t)) details.push({ field: `template_ids[${i}]`, message: `no active template ${t} in this team` });
      });
    }
    if (mailAccountIds) {
      const found = await lockActiveMailAccountIds(trx, teamId, mailAccountIds);
      mailAccountIds.forEach((a, i) => {
        if (!found.has(a)) details.push({ field: `mail_account_ids[${i}]`, message: `no active mail account ${a} in this team` });
      });
    }
    const broadcast = current.campaign_type === 'broadcast';
    const automation = current.campaign_type === 'automation';
    if (patch.broadcast_send && !broadcast) details.push({ field: 'broadcast_send', message: 'only a broadcast takes broadcast_send' });
    if (patch.automation_send && !automation) details.push({ field: 'automation_send', message: 'only an automation takes automation_send' });
    if (patch.events && (broadcast || automation)) details.push({ field: 'events', message: `a${automation ? 'n automation' : ' broadcast'} has no trigger events` });
    details.push(...scheduleDetails(patch));
    if (details.length > 0) throw validationFailed(details, 'invalid campaign');
    // A broadcast's or automation's audience and schedule are fixed once its send has started.
    if ((broadcast || automation) && (patch.broadcast_send || patch.automation_send || patch.segment_query) && current.send_status !== 'scheduled') {
      throw new AppError('CONFLICT', `the ${current.campaign_type}'s send is ${current.send_status}; its segment and schedule can be changed only while it is scheduled`);
    }

    const sd = current.send_data!;
    const bs = patch.broadcast_send;
    const ets = patch.event_triggered_send ?? {};
    const sendData: SendDataValue = {
      ...sd,
      template_ids: templateIds ?? sd.template_ids,
      mail_account_ids: mailAccountIds ?? sd.mail_account_ids,
      from_name: patch.from_name ?? sd.from_name,
      reply_to_name: patch.reply_to_name ?? sd.reply_to_name,
      reply_to_email: patch.reply_to_email === undefined ? sd.reply_to_email : (patch.reply_to_email ?? '').toLowerCase(),
      open_tracking: patch.open_tracking ?? sd.open_tracking,
      click_tracking: patch.click_tracking ?? sd.click_tracking,
      segment_query: patch.segment_query ? { rules: patch.segment_query.rules } : sd.segment_query,
      automation_send: automationSendData(patch.automation_send, sd.automation_send),
      verification_data: verificationData(patch.verification_data, sd.verification_data),
      broadcast_send: {
        send_amount: bs?.send_amount ?? sd.broadcast_send.send_amount,
        scheduled_send_time: bs && bs.scheduled_send_time !== undefined
          ? (bs.scheduled_send_time === null ? null : dateTimeValue(bs.scheduled_send_time).toISOString())
          : sd.broadcast_send.scheduled_send_time,
      },
      event_triggered_send: {
        ...sd.event_triggered_send,
        events: events ?? sd.event_triggered_send.events,
        enabled: ets.enabled ?? sd.event_triggered_send.enabled,
        contact_cooldown_interval: ets.contact_cooldown_interval ?? sd.event_triggered_send.contact_cooldown_interval,
        contact_daily_email_cap: ets.contact_daily_email_cap ?? sd.event_triggered_send.contact_daily_email_cap,
      },
    };
    const json = JSON.stringify(sendData);
    await sql`
      UPDATE campaigns
         SET name = coalesce(${name ?? null}, name),
             trigger_events = ${sendData.event_triggered_send.events}::text[],
             draft_data = jsonb_set(draft_data, '{send_data}', ${json}::jsonb),
             updated_at = now()
       WHERE team_id = ${teamId} AND id = ${id}`.execute(trx);
    if (current.send_id) {
      await sql`UPDATE campaign_sends SET send_data = ${json}::jsonb, updated_at = now() WHERE id = ${current.send_id} AND team_id = ${teamId}`.execute(trx);
      if (broadcast && bs && current.send_status === 'scheduled') {
        const at = sendData.broadcast_send.scheduled_send_time;
        // As a Date, not the stored text: PostgreSQL does not read JavaScript's
        // spelling of UTC years 0 and 10000 (`0000-…`, `+010000-…`), pg's Date writing it does.
        await sql`UPDATE campaign_sends SET next_send_at = ${at ? new Date(at) : null}::timestamptz WHERE id = ${current.send_id}`.execute(trx);
        await scheduleBroadcast(trx, current.send_id, at ? new Date(at) : null);
      }
      if (automation && patch.automation_send && current.send_status === 'scheduled') {
        const at = sendData.automation_send.scheduled_send_time;
        await sql`UPDATE campaign_sends SET next_send_at = ${at ? new Date(at) : null}::timestamptz WHERE id = ${current.send_id}`.execute(trx);
        await scheduleIteration(trx, current.send_id, at ? new Date(at) : null);
      }
    }
    return (await getCampaign(trx, teamId, id))!;
  });
}

export type DeletedCampaign = { deleted: 'soft' | 'hard'; cancelled: number };

/**
 * Deletes a campaign of the team. It triggers nothing from the commit on.
 * Its messages not yet handed to a send job's SMTP claim (`queued`, or
 * `deferred` waiting for a retry) become `cancelled`; a message already being
 * sent (`sending`) finishes and is recorded. When the message log holds any
 * message of the campaign, the campaign row stays, marked deleted (every read
 * leaves it out; the log keeps its campaign for stats); otherwise it is
 * deleted with its sends and decisions. Throws 404 for an unknown or deleted
 * campaign, or another team's.
 */
export async function deleteCampaign(db: Db, teamId: string, id: string): Promise<DeletedCampaign> {
  return db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ id: string }>`
      SELECT id FROM campaigns WHERE team_id = ${teamId} AND id = ${id} AND deleted_at IS NULL FOR UPDATE`.execute(trx);
    if (!rows[0]) throw notFound('campaign');
    // The send task claims with `status IN ('queued', 'deferred')` on the row: of
    // this update and a claim, one waits for the other and then sees its result.
    const cancelled = await sql`
      UPDATE email_send_log SET status = 'cancelled', last_error = 'campaign deleted', updated_at = now()
       WHERE team_id = ${teamId} AND campaign_id = ${id} AND status IN ('queued', 'deferred')`.execute(trx);
    const { rows: logged } = await sql<{ one: number }>`
      SELECT 1 AS one FROM email_send_log WHERE team_id = ${teamId} AND campaign_id = ${id} LIMIT 1`.execute(trx);
    if (logged.length > 0) {
      await sql`UPDATE campaigns SET deleted_at = now(), updated_at = now() WHERE id = ${id} AND team_id = ${teamId}`.execute(trx);
    } else {
      await sql`DELETE FROM campaigns WHERE id = ${id} AND team_id = ${teamId}`.execute(trx);
    }
    return { deleted: logged.length > 0 ? 'soft' : 'hard', cancelled: Number(cancelled.numAffectedRows ?? 0) };
  });
}
