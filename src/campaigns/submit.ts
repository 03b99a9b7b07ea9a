// Campaign submit: one campaign fired for one existing contact, decided in the
// request's transaction. The submission is an event row (idempotency key), so
// it rides the bus's claimEvent, but it triggers nothing else.
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { decide, type Candidate, type Decision } from './engine.ts';
import type { SendDataValue } from './schemas.ts';
import { AppError, notFound, validationFailed } from '../lib/errors.ts';
import { claimEvent } from '../events/emit.ts';
import { normalizeEmail } from '../lib/text.ts';

export type SubmitInput = { event_name?: string; email?: string; idempotency_key?: string; payload?: Record<string, unknown> };

/**
 * Fires one campaign for one existing contact, now, in the request's
 * transaction: the decision (send or skip, with the same rules as a trigger) is
 * the answer. The submission is recorded as an event (already processed: it
 * triggers no other campaign and no webhook), so the same idempotency_key
 * returns the first decision.
 */
export async function submitToCampaign(
  db: Db, teamId: string, campaignId: string, input: SubmitInput, appSecret?: string,
): Promise<{ eventId: string; decision: Decision | null }> {
  return db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ trigger_events: string[]; send_id: string | null; status: string | null; send_data: SendDataValue; campaign_type: string }>`
      SELECT c.trigger_events, s.id AS send_id, s.status, s.send_data, c.campaign_type
        FROM campaigns c
        LEFT JOIN LATERAL (SELECT id, status, send_data FROM campaign_sends s
                            WHERE s.campaign_id = c.id AND s.team_id = c.team_id ORDER BY s.created_at DESC, s.id DESC LIMIT 1) s ON true
       WHERE c.team_id = ${teamId} AND c.id = ${campaignId} AND c.deleted_at IS NULL`.execute(tx);
    const campaign = rows[0];
    if (!campaign) throw notFound('campaign');
    // A broadcast's recipients are its segment, listed when it starts; nobody is added one by one.
    if (campaign.campaign_type === 'broadcast') throw new AppError('CONFLICT', 'a broadcast takes no submissions; its recipients are its segment');
    if (!campaign.send_id || (campaign.status !== 'active' && campaign.status !== 'paused')) {
      throw new AppError('CONFLICT', `campaign send is ${campaign.status ?? 'missing'}; nothing can be submitted to it`);
    }
    const email = input.email === undefined ? undefined : normalizeEmail(input.email);
    const contact = email
      ? (await sql<{ id: string }>`SELECT id FROM contacts WHERE team_id = ${teamId} AND email = ${email}`.execute(tx)).rows[0]
      : undefined;
    const name = input.event_name ?? campaign.trigger_events[0] ?? 'contact.saved';
    const ev = await claimEvent(tx, { teamId, name, key: input.idempotency_key, input: input.payload ?? null });
    if (ev.duplicate) {
      const { rows: prior } = await sql<Decision>`
        SELECT d.id, d.event_id, d.campaign_id, d.campaign_send_id, d.contact_id, d.decision, d.reason, d.email_send_log_id,
               l.template_id, l.mail_account_id, d.decided_at
          FROM campaign_decisions d LEFT JOIN email_send_log l ON l.id = d.email_send_log_id
         WHERE d.event_id = ${ev.id} AND d.team_id = ${teamId}`.execute(tx);
      if (prior.length !== 1 || prior[0].campaign_id !== campaignId) {
        throw new AppError('CONFLICT', 'idempotency_key was already used by another event');
      }
      return { eventId: prior[0].event_id, decision: prior[0] };
    }
    if (!contact) {
      const message = email ? 'no contact with this address in this team' : 'is required (idempotency_key alone names no contact)';
      throw validationFailed([{ field: 'email', message }], 'invalid submission');
    }
    // Decided here and now (decided_at set), so no process_events job takes it for the other campaigns.
    await sql`UPDATE events SET contact_id = ${contact.id}, processed_at = now(), decided_at = now(),
                     payload = ${JSON.stringify({ source: 'submit', campaign_id: campaignId, contact_id: contact.id, email })}::jsonb
               WHERE id = ${ev.id}`.execute(tx);
    const candidate: Candidate = {
      event_id: ev.id, team_id: teamId, contact_id: contact.id, campaign_id: campaignId,
      campaign_send_id: campaign.send_id, send_status: campaign.status, send_data: campaign.send_data,
    };
    const [decision] = await decide(tx, [candidate], new Date(), appSecret);
    return { eventId: ev.id, decision: decision ?? null };
  });
}
