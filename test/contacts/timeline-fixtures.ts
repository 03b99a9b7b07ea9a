// A contact with one of everything the contact timeline shows: saved and an
// ingested lead and an unsubscribe (through the API, so the real writers make
// those rows), and seeded rows at fixed times for the rest (decisions,
// messages in each state, message events, tracking hits), with webhook
// deliveries made by the real fan-out (enqueueDeliveries).
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import type { Db } from '../../src/db/pool.ts';
import { enqueueDeliveries } from '../../src/webhooks/deliveries.ts';

/** Fixed times of the seeded rows (the API-made ones are "now", later than all of these). */
export const T0 = Date.parse('2026-03-01T10:00:00.000Z');
export const at = (minutes: number) => new Date(T0 + minutes * 60_000).toISOString();

export type Seeded = { contactId: string; email: string; campaignId: string; messages: Record<string, string>; skipEventId: string };

export async function seedContactHistory(app: FastifyInstance, db: Db, teamId: string, key: string, email = 'tim@example.com'): Promise<Seeded> {
  const api = async (url: string, payload: object) => {
    const res = await app.inject({ method: 'POST', url: `/public/v1${url}`, headers: { 'x-api-key': key }, payload });
    assert.ok(res.statusCode < 300, `${url}: ${res.statusCode} ${res.body}`);
    return res.json();
  };
  const contactId: string = (await api('/email/contacts/upsert', { email, first_name: 'Tim' })).contact.id;

  const one = async <T>(q: ReturnType<typeof sql<T>>) => (await q.execute(db)).rows[0]!;
  const campaignId = (await one(sql<{ id: string }>`
    INSERT INTO campaigns (team_id, name, draft_data, trigger_events) VALUES (${teamId}, 'Welcome series', '{}', '{contact.saved}') RETURNING id`)).id;
  const event = async (name: string, minutes: number, payload: Record<string, unknown> = {}) => (await one(sql<{ id: string }>`
    INSERT INTO events (team_id, name, contact_id, payload, occurred_at, created_at)
    VALUES (${teamId}, ${name}, ${contactId}, ${JSON.stringify(payload)}::jsonb, ${at(minutes)}, ${at(minutes)}) RETURNING id`)).id;
  const message = async (status: string, minutes: number, updatedMinutes = minutes, extra: { last_error?: string } = {}) => (await one(sql<{ id: string }>`
    INSERT INTO email_send_log (team_id, campaign_id, contact_id, email, subject, status, source, last_error, created_at, updated_at)
    VALUES (${teamId}, ${campaignId}, ${contactId}, ${email}, ${`Hello ${status}`}, ${status}, 'campaign', ${extra.last_error ?? null},
            ${at(minutes)}, ${at(updatedMinutes)}) RETURNING id`)).id;

  // Two decisions on one trigger event: a skip (cooldown) and, on another, a send.
  const skipEventId = await event('contact.saved', 1, { contact_id: contactId, email, first_name: 'Tim' });
  const sendEventId = await event('contact.saved', 2, { contact_id: contactId, email, first_name: 'Tim' });
  await sql`INSERT INTO campaign_decisions (team_id, event_id, campaign_id, contact_id, decision, reason, decided_at)
            VALUES (${teamId}, ${skipEventId}, ${campaignId}, ${contactId}, 'skip', 'cooldown', ${at(1)})`.execute(db);
  const sent = await message('delivered', 2, 12);
  await sql`INSERT INTO campaign_decisions (team_id, event_id, campaign_id, contact_id, decision, email_send_log_id, decided_at)
            VALUES (${teamId}, ${sendEventId}, ${campaignId}, ${contactId}, 'send', ${sent}, ${at(2)})`.execute(db);
  const base = { email_send_log_id: sent, contact_id: contactId, email };
  await event('email.sent', 3, { ...base, subject: 'Hello delivered', sent_at: at(3) });
  await event('email.deferred', 4, { ...base, deferred_at: at(4), defer_reason: '451 try later' });
  await event('email.delivered', 5, { ...base, delivered_at: at(5) });
  // An open's event row: the timeline shows the hit (with its verdict), not the event twice.
  const openEvent = await event('email.bot.opened', 6, { ...base });
  await sql`INSERT INTO tracking_hits (team_id, email_send_log_id, contact_id, kind, method, is_bot, bot_score, reasons, event_id, created_at)
            VALUES (${teamId}, ${sent}, ${contactId}, 'open', 'GET', true, 0.9, '{apple_mpp_proxy,prefetch_timing}', ${openEvent}, ${at(6)}),
                   (${teamId}, ${sent}, ${contactId}, 'click', 'GET', false, 0.1, '{}', NULL, ${at(7)})`.execute(db);
  await sql`UPDATE tracking_hits SET url = 'https://example.com/offer' WHERE kind = 'click' AND email_send_log_id = ${sent}`.execute(db);
  await event('email.replied', 8, { ...base, replied_at: at(8), subject: 'Re: Hello' });
  await event('email.complained', 9, { ...base, complained_at: at(9), feedback_type: 'abuse' });
  const bounced = await message('bounced_soft', 10, 11);
  await event('email.bounced.soft', 11, { email_send_log_id: bounced, contact_id: contactId, email, bounced_at: at(11), bounce_reason: 'mailbox full' });
  const failed = await message('failed', 13, 14, { last_error: 'template render failed' });
  const cancelled = await message('cancelled', 15, 16);
  const suppressed = await message('suppressed', 17);

  // A webhook subscribed to every event the contact has, fanned out by the real code.
  await sql`INSERT INTO webhooks (team_id, url, events, secret_enc)
            VALUES (${teamId}, 'https://hooks.example.com/in', '{email.contact.saved,email.sent,email.lead.created}', '\\x00'::bytea)`.execute(db);
  const lead = await api('/email/events', { event_name: 'lead.created', email });
  assert.ok(lead);
  await api('/email/contacts/unsubscribe', { email });
  const ids = (await sql<{ id: string }>`SELECT id FROM events WHERE team_id = ${teamId} AND contact_id = ${contactId}`.execute(db)).rows;
  assert.ok((await enqueueDeliveries(db, ids)) >= 3, 'deliveries for the saves, the send and the lead');
  return { contactId, email, campaignId, messages: { sent, bounced, failed, cancelled, suppressed }, skipEventId };
}
