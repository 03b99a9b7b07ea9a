-- Transactional e-mail (issue 13): one message log for campaign and
-- transactional mail, the team's suppression list every send path checks,
-- idempotency keys of submit/batch, and the per-account count of messages
-- claimed for SMTP each UTC day (daily limits at claim time).

-- One row per suppressed address of a team. `email` in clear, or only its keyed
-- hash (HMAC-SHA256 with the installation's secret) once the address is erased.
-- One row per address: the strongest reason wins (a hard bounce replaces an
-- unsubscribe, never the other way round; see src/mail/suppressions.ts).
CREATE TABLE suppressions (
  id          uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  email       text,
  email_hmac  text,
  reason      text NOT NULL CHECK (reason IN ('unsubscribed', 'bounced_hard', 'soft_bounce', 'complained', 'manual', 'erased')),
  -- The message (email_send_log id) that caused it, when one did; no foreign
  -- key: the suppression outlives the message's retention.
  message_id  uuid,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CHECK (email IS NOT NULL OR email_hmac IS NOT NULL)
);
CREATE UNIQUE INDEX suppressions_team_email_idx ON suppressions (team_id, email) WHERE email IS NOT NULL;
CREATE UNIQUE INDEX suppressions_team_hmac_idx ON suppressions (team_id, email_hmac) WHERE email_hmac IS NOT NULL;

-- What the contacts table already says, so the list is complete from the start.
INSERT INTO suppressions (team_id, email, reason, created_at)
SELECT team_id, email,
       CASE status WHEN 'bounced' THEN 'bounced_hard' WHEN 'complained' THEN 'complained' ELSE 'unsubscribed' END,
       coalesce(unsubscribed_at, last_bounced_at, updated_at)
  FROM contacts WHERE status IN ('bounced', 'complained', 'unsubscribed')
ON CONFLICT DO NOTHING;

-- The message log takes transactional mail: its source, the recipient's name
-- and what the client gave for rendering (variables, from_name, reply_to,
-- subject). `claimed_at` is when the row was last claimed for SMTP.
ALTER TABLE email_send_log
  ADD COLUMN source text NOT NULL DEFAULT 'campaign' CHECK (source IN ('campaign', 'transactional')),
  ADD COLUMN to_name text,
  ADD COLUMN render jsonb,
  ADD COLUMN claimed_at timestamptz;
ALTER TABLE email_send_log DROP CONSTRAINT email_send_log_status_check;
ALTER TABLE email_send_log ADD CONSTRAINT email_send_log_status_check
  CHECK (status IN ('queued', 'sending', 'sent', 'deferred', 'bounced_soft', 'bounced_hard', 'failed', 'cancelled', 'suppressed'));
-- GET /email/emails?source=transactional pages through one source.
CREATE INDEX email_send_log_team_source_idx ON email_send_log (team_id, source, created_at DESC, id DESC);

-- Idempotency keys of POST /email/emails/submit and /batch, kept 24 hours.
-- Only 2xx answers are stored (the row commits with the e-mails it answers for).
CREATE TABLE email_idempotency (
  team_id       uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  key           text NOT NULL,
  -- sha256 of the route and the canonical request body: same key, other body → 409.
  request_hash  text NOT NULL,
  response      jsonb NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team_id, key)
);
CREATE INDEX email_idempotency_created_idx ON email_idempotency (created_at);

-- Messages claimed for SMTP per mail account and UTC day. A send job reserves
-- slots for its batch in one statement, only up to the limit of the messages'
-- source, so two workers cannot both take an account's last slot; what it does
-- not use it gives back (src/mail/daily-usage.ts).
CREATE TABLE mail_account_usage (
  mail_account_id  uuid NOT NULL REFERENCES mail_accounts (id) ON DELETE CASCADE,
  day              date NOT NULL,
  team_id          uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  claimed          integer NOT NULL DEFAULT 0,
  -- Slots the latest reservation got: RETURNING shows only the new row, and
  -- PostgreSQL before 18 has no RETURNING OLD, so the grant is written with it.
  last_grant       integer NOT NULL DEFAULT 0,
  PRIMARY KEY (mail_account_id, day)
);

-- Campaign mail may use this share of an account's daily limit; transactional
-- mail all of it, so a campaign can never starve password resets.
ALTER TABLE mail_accounts
  ADD COLUMN campaign_share_percent integer NOT NULL DEFAULT 90 CHECK (campaign_share_percent BETWEEN 1 AND 100);
