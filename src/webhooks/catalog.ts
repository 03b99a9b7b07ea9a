// The webhook event catalog (docs/api.md, "Webhook events") and a realistic sample payload
// per event (docs/api.md, "Webhook payloads"), used by simulate.
import { randomUUID } from 'node:crypto';

export const WEBHOOK_EVENTS = [
  'email.sent',
  'email.delivered',
  'email.deferred',
  'email.bounced.soft',
  'email.bounced.hard',
  'email.opened',
  'email.clicked',
  'email.replied',
  'email.complained',
  'email.bot.opened',
  'email.bot.clicked',
  'email.contact.saved',
  'email.contact.unsubscribed',
  'email.lead.created',
  'email.sale.created',
  'webhook.disabled',
  'email.account.health',
] as const;

export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

export const WEBHOOK_SOURCES = ['n8n', 'zapier', 'make', 'internal'] as const;

export function samplePayload(event: WebhookEvent, now: Date = new Date()): Record<string, unknown> {
  const at = now.toISOString();
  const contact = { contact_id: randomUUID(), email: 'jane.doe@example.com' };
  const send = { email_send_log_id: randomUUID(), ...contact };
  const messageId = `${randomUUID()}@mail.example.com`;
  const visit = { ip_address: '203.0.113.24', user_agent: 'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15', country_code: 'US' };
  const opened = { ...send, opened_at: at, ...visit };
  const clicked = { ...send, clicked_at: at, url: 'https://shop.example.com/spring-sale', ...visit, short_link_id: null };
  const bot = { is_bot: true, bot_score: 0.92, reasons: ['security_scanner_user_agent', 'hit_within_seconds_of_send'] };
  const bounce = {
    ...send,
    bounced_at: at,
    bounce_reason: 'mailbox does not exist',
    bounce_category: 'invalid_recipient',
    message_id: messageId,
    diagnostic: '550 5.1.1 <jane.doe@example.com>: Recipient address rejected: User unknown',
  };
  switch (event) {
    case 'email.sent':
      return { ...send, subject: 'Your spring picks, Jane', sent_at: at, mail_server_id: randomUUID(), campaign_id: randomUUID(), campaign_send_id: randomUUID() };
    case 'email.delivered':
      return { ...send, delivered_at: at, message_id: messageId };
    case 'email.deferred':
      return { ...send, deferred_at: at, defer_reason: '451 4.7.1 Greylisted, please try again later', message_id: messageId };
    case 'email.bounced.soft':
      return { ...bounce, bounce_reason: 'mailbox full', bounce_category: 'mailbox_full', diagnostic: '452 4.2.2 Mailbox full' };
    case 'email.bounced.hard':
      return bounce;
    case 'email.opened':
      return opened;
    case 'email.clicked':
      return clicked;
    case 'email.replied':
      return {
        ...send,
        replied_at: at,
        message_id: `${randomUUID()}@example.com`,
        in_reply_to: messageId,
        headers: { from: 'Jane Doe <jane.doe@example.com>', subject: 'Re: Your spring picks, Jane' },
        subject: 'Re: Your spring picks, Jane',
        content: 'Thanks! Do you ship to Canada?',
      };
    case 'email.complained':
      return { ...send, complained_at: at, feedback_type: 'abuse', message_id: messageId };
    case 'email.bot.opened':
      return { ...opened, user_agent: 'Mozilla/5.0 (compatible; Barracuda Sentinel)', decision: bot };
    case 'email.bot.clicked':
      return { ...clicked, user_agent: 'Mozilla/5.0 (compatible; Barracuda Sentinel)', decision: bot };
    case 'email.contact.saved':
      return { ...contact, first_name: 'Jane', last_name: 'Doe', phone: '+15555550123', foreign_id: 'crm-1042', country_code: 'US', created_at: at, updated_at: at };
    case 'email.contact.unsubscribed':
      return { ...contact, unsubscribed_at: at, unsubscribe_reason: 'unsubscribed via link', unsubscribe_method: 'link' };
    case 'email.lead.created':
      return { lead_id: randomUUID(), ...contact, created_at: at, source: 'landing-page', campaign_id: randomUUID(), campaign_send_id: randomUUID() };
    case 'email.sale.created':
      return { sale_id: randomUUID(), ...contact, created_at: at, amount: 49.9, currency: 'USD', source: 'shop', campaign_id: randomUUID(), campaign_send_id: randomUUID() };
    case 'webhook.disabled':
      return {
        webhook_id: randomUUID(),
        url: 'https://hooks.example.com/plover',
        disabled_at: at,
        reason: 'every delivery attempt failed for 5 days (32 attempts since 2026-03-01T09:12:44.000Z)',
        last_failure_at: at,
      };
    case 'email.account.health':
      return {
        mail_account_id: randomUUID(), from_email: 'news@shop.example.com', window_hours: 24,
        bounce_rate: 2.4, complaint_rate: 0.05, state: 'warning', previous_state: 'ok',
      };
  }
}
