-- One row per e-mail the engine decided to send (one per send decision), from
-- queueing to its final SMTP result. Tracking (opens, clicks, unsubscribes from
-- mail) hangs off this row: its id is in every tracking URL of the message.
CREATE TABLE email_send_log (
  id                uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id           uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  campaign_id       uuid REFERENCES campaigns (id) ON DELETE SET NULL,
  campaign_send_id  uuid REFERENCES campaign_sends (id) ON DELETE SET NULL,
  contact_id        uuid REFERENCES contacts (id) ON DELETE SET NULL,
  -- The triggering event, when there was one (submit has none).
  event_id          uuid REFERENCES events (id) ON DELETE SET NULL,
  template_id       uuid REFERENCES templates (id) ON DELETE SET NULL,
  mail_account_id   uuid REFERENCES mail_accounts (id) ON DELETE SET NULL,
  email             text NOT NULL,
  subject           text,
  -- Our generated Message-ID, without angle brackets.
  message_id        text,
  status            text NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'sending', 'sent', 'deferred', 'bounced_soft', 'bounced_hard', 'failed', 'cancelled')),
  attempts          integer NOT NULL DEFAULT 0,
  open_tracking     boolean NOT NULL DEFAULT true,
  click_tracking    boolean NOT NULL DEFAULT true,
  smtp_response     text,
  last_error        text,
  queued_at         timestamptz NOT NULL DEFAULT now(),
  sent_at           timestamptz,
  bounced_at        timestamptz,
  first_opened_at   timestamptz,
  opens_count       integer NOT NULL DEFAULT 0,
  first_clicked_at  timestamptz,
  clicks_count      integer NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_send_log_team_idx ON email_send_log (team_id, created_at DESC, id DESC);
CREATE INDEX email_send_log_contact_idx ON email_send_log (contact_id, created_at DESC);
CREATE INDEX email_send_log_campaign_idx ON email_send_log (campaign_id, created_at DESC);
-- Daily caps per mail account count today's sends.
CREATE INDEX email_send_log_account_day_idx ON email_send_log (mail_account_id, created_at) WHERE status <> 'cancelled';
