-- Mail that comes back (bounces by DSN, complaints by ARF or provider event,
-- replies, provider deliveries): one row per piece of feedback about one of
-- our messages, the message's new status, and the ids that let feedback find
-- its message.

-- The id the relay named in its 250 answer ("queued as 4B5F81E0F3", SES's
-- message id): provider events name messages by it.
ALTER TABLE email_send_log ADD COLUMN provider_message_id text;
CREATE INDEX email_send_log_provider_id_idx ON email_send_log (provider_message_id, team_id) WHERE provider_message_id IS NOT NULL;
ALTER TABLE email_send_log ADD COLUMN delivered_at timestamptz;
ALTER TABLE email_send_log DROP CONSTRAINT email_send_log_status_check;
ALTER TABLE email_send_log ADD CONSTRAINT email_send_log_status_check
  CHECK (status IN ('queued', 'sending', 'sent', 'delivered', 'deferred', 'bounced_soft', 'bounced_hard', 'failed', 'cancelled', 'suppressed'));

-- Per mail account: a signed per-message return path under INBOUND_DOMAIN, and
-- a signed Reply-To that brings replies back to the listener.
ALTER TABLE mail_accounts ADD COLUMN verp boolean NOT NULL DEFAULT false;
ALTER TABLE mail_accounts ADD COLUMN capture_replies boolean NOT NULL DEFAULT false;

CREATE TABLE message_feedback (
  id                 uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id            uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  -- Goes with its message (retention, erasure).
  email_send_log_id  uuid NOT NULL REFERENCES email_send_log (id) ON DELETE CASCADE,
  contact_id         uuid REFERENCES contacts (id) ON DELETE SET NULL,
  email              text NOT NULL,
  kind               text NOT NULL CHECK (kind IN ('bounce_hard', 'bounce_soft', 'complaint', 'reply', 'delivered')),
  -- The same report twice (a resent DSN, a provider retry) is recorded once.
  dedup_key          text NOT NULL,
  -- Where it came from: smtp (the inbound listener), imap, ses, sendgrid, postmark, mailgun...
  source             text NOT NULL,
  status_code        text,
  diagnostic         text,
  feedback_type      text,
  detail             jsonb,
  raw_ref            text,
  occurred_at        timestamptz NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX message_feedback_dedup_idx ON message_feedback (email_send_log_id, dedup_key);
CREATE INDEX message_feedback_team_idx ON message_feedback (team_id, occurred_at DESC);
-- Repeated soft bounces of one address within SOFT_BOUNCE_DAYS suppress it.
CREATE INDEX message_feedback_soft_idx ON message_feedback (team_id, email, occurred_at) WHERE kind = 'bounce_soft';
