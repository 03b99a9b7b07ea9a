-- Mail that comes back through a relay (issue 14): provider event webhooks
-- and IMAP polling of a bounce/reply mailbox.
--
-- provider_webhooks: one inbound URL per row, /inbound/<provider>/<token>.
-- The token is looked up by its SHA-256 (token_hash) and kept sealed
-- (token_enc, AES-GCM under APP_SECRET) so the API can show the URL again.
-- secret_enc holds the provider's verification material, sealed: SendGrid's
-- public key, Mailgun's signing key, or the basic-auth password Postmark sends.
-- SES needs none (SNS signs with its certificate); the first confirmed topic is
-- pinned in sns_topic_arn and notifications from any other topic are refused.
CREATE TABLE provider_webhooks (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  team_id uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  provider text NOT NULL CHECK (provider IN ('ses', 'sendgrid', 'postmark', 'mailgun')),
  description text,
  token_hash bytea NOT NULL UNIQUE,
  token_enc bytea NOT NULL,
  secret_enc bytea,
  sns_topic_arn text,
  events_received bigint NOT NULL DEFAULT 0,
  events_unmatched bigint NOT NULL DEFAULT 0,
  last_event_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provider_webhooks_team_idx ON provider_webhooks (team_id, created_at DESC);

-- IMAP mailbox of a mail account, polled for DSNs, ARF reports and replies.
-- One row per account (absent: no polling). next_poll_at drives the periodic
-- job: it claims due rows, and an error pushes the next poll back (failures
-- doubles the wait up to an hour), so a broken mailbox is never a tight loop.
CREATE TABLE mail_account_imap (
  mail_account_id uuid PRIMARY KEY REFERENCES mail_accounts (id) ON DELETE CASCADE,
  team_id uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  host text NOT NULL,
  port integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
  security text NOT NULL CHECK (security IN ('tls', 'starttls', 'none')),
  username text NOT NULL,
  password_enc bytea NOT NULL,
  folder text NOT NULL DEFAULT 'INBOX',
  next_poll_at timestamptz NOT NULL DEFAULT now(),
  last_polled_at timestamptz,
  last_error text,
  failures integer NOT NULL DEFAULT 0,
  messages_processed bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_account_imap_due_idx ON mail_account_imap (next_poll_at);
CREATE INDEX mail_account_imap_team_idx ON mail_account_imap (team_id);
