-- Contacts: one row per (team, e-mail address). Counters and activity times are
-- kept on the row so the unsubscribed list and the engine read one row.
CREATE TABLE contacts (
  id                  uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id             uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  email               text NOT NULL,
  status              text NOT NULL DEFAULT 'active'
                      CHECK (status IN ('active', 'unsubscribed', 'bounced', 'complained')),
  first_name          text,
  last_name           text,
  phone               text,
  foreign_id          text,
  country_code        text,
  tags                text[] NOT NULL DEFAULT '{}',
  is_email_valid      boolean,
  validation_method   text,
  validation_reason   text,
  validated_at        timestamptz,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  unsubscribed_at     timestamptz,
  unsubscribed_reason text,
  first_sent_at       timestamptz,
  last_sent_at        timestamptz,
  sent_count          integer NOT NULL DEFAULT 0,
  first_opened_at     timestamptz,
  last_opened_at      timestamptz,
  opens_count         integer NOT NULL DEFAULT 0,
  first_clicked_at    timestamptz,
  last_clicked_at     timestamptz,
  clicks_count        integer NOT NULL DEFAULT 0,
  first_lead_at       timestamptz,
  last_lead_at        timestamptz,
  leads_count         integer NOT NULL DEFAULT 0,
  first_sale_at       timestamptz,
  last_sale_at        timestamptz,
  sales_count         integer NOT NULL DEFAULT 0,
  first_bounced_at    timestamptz,
  last_bounced_at     timestamptz,
  hard_bounces_count  integer NOT NULL DEFAULT 0,
  soft_bounces_count  integer NOT NULL DEFAULT 0,
  custom_str_1 text, custom_str_2 text, custom_str_3 text, custom_str_4 text, custom_str_5 text,
  custom_int_1 bigint, custom_int_2 bigint, custom_int_3 bigint, custom_int_4 bigint, custom_int_5 bigint,
  custom_dec_1 numeric, custom_dec_2 numeric, custom_dec_3 numeric,
  custom_datetime_1 timestamptz, custom_datetime_2 timestamptz, custom_datetime_3 timestamptz,
  custom_bool_1 boolean, custom_bool_2 boolean, custom_bool_3 boolean,
  UNIQUE (team_id, email)
);
CREATE INDEX contacts_team_created_idx ON contacts (team_id, created_at DESC, id DESC);
CREATE INDEX contacts_unsubscribed_idx ON contacts (team_id, created_at DESC, id DESC) WHERE status = 'unsubscribed';

CREATE TABLE templates (
  id            uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id       uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  name          text NOT NULL,
  subject       text,
  content_type  text NOT NULL DEFAULT 'html' CHECK (content_type = 'html'),
  scope         text NOT NULL DEFAULT 'private' CHECK (scope IN ('private', 'public')),
  status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
  meta          jsonb NOT NULL DEFAULT '{"json_schema": "", "tags": []}',
  content       text NOT NULL,
  alt_content   text NOT NULL DEFAULT '',
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX templates_team_idx ON templates (team_id, created_at DESC, id DESC);

-- SMTP accounts. The password is AES-256-GCM ciphertext (key derived from APP_SECRET).
CREATE TABLE mail_accounts (
  id            uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id       uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  host          text NOT NULL,
  port          integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
  security      text NOT NULL CHECK (security IN ('tls', 'starttls', 'none')),
  username      text,
  password_enc  bytea,
  from_email    text NOT NULL,
  from_name     text,
  daily_limit   integer NOT NULL DEFAULT 500 CHECK (daily_limit > 0),
  status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_accounts_team_idx ON mail_accounts (team_id, created_at DESC, id DESC);

CREATE TABLE campaigns (
  id              uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id         uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  name            text NOT NULL,
  delivery_type   text NOT NULL DEFAULT 'event',
  campaign_type   text NOT NULL DEFAULT 'event_triggered'
                  CHECK (campaign_type IN ('event_triggered', 'broadcast', 'automation')),
  meta            jsonb NOT NULL DEFAULT '[]',
  draft_data      jsonb NOT NULL,
  -- Trigger events (dotted form), copied out of send_data for the engine's lookup.
  trigger_events  text[] NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX campaigns_team_idx ON campaigns (team_id, created_at DESC, id DESC);

CREATE TABLE campaign_sends (
  id                   uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id              uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  campaign_id          uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
  campaign_type        text NOT NULL,
  status               text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'completed', 'failed')),
  next_send_at         timestamptz,
  next_send_countdown  jsonb NOT NULL DEFAULT '{"total": 0, "remaining": 0}',
  send_data            jsonb NOT NULL,
  send_progress        jsonb NOT NULL DEFAULT
    '{"total_sent": 0, "total_bounced": 0, "delivery_rate": 0, "current_iteration": 0, "reason": ""}',
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX campaign_sends_campaign_idx ON campaign_sends (campaign_id, created_at DESC);
CREATE INDEX campaign_sends_active_idx ON campaign_sends (team_id) WHERE status = 'active';

-- Every business event (what happened, to whom), recorded in the transaction of
-- the change that caused it; processing (webhooks, campaign triggers) is a job
-- enqueued in that same transaction.
CREATE TABLE events (
  id               uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id          uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  name             text NOT NULL,
  contact_id       uuid REFERENCES contacts (id) ON DELETE SET NULL,
  payload          jsonb NOT NULL DEFAULT '{}',
  idempotency_key  text,
  occurred_at      timestamptz NOT NULL DEFAULT now(),
  created_at       timestamptz NOT NULL DEFAULT now(),
  processed_at     timestamptz,
  UNIQUE (team_id, idempotency_key)
);
CREATE INDEX events_team_idx ON events (team_id, created_at DESC, id DESC);
