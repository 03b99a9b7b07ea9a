-- Campaign engine (issue 5): ingested events, leads and sales, one recorded
-- decision per (event, campaign), and the rotation cursors of each campaign send.

-- What the client sent to POST /email/events (or /submit) as `payload`. The
-- event's own `payload` column holds the webhook payload (docs/api.md, "Webhook payloads");
-- templates read this one as `event.payload`.
ALTER TABLE events ADD COLUMN input jsonb;

CREATE TABLE leads (
  id                uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id           uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  contact_id        uuid REFERENCES contacts (id) ON DELETE SET NULL,
  event_id          uuid NOT NULL UNIQUE REFERENCES events (id) ON DELETE CASCADE,
  source            text,
  -- Attribution given by the client; checked to be the team's at ingestion, no
  -- foreign key so a deleted campaign does not rewrite history.
  campaign_id       uuid,
  campaign_send_id  uuid,
  created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX leads_team_idx ON leads (team_id, created_at DESC, id DESC);
CREATE INDEX leads_contact_idx ON leads (contact_id, created_at DESC);

CREATE TABLE sales (
  id                uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id           uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  contact_id        uuid REFERENCES contacts (id) ON DELETE SET NULL,
  event_id          uuid NOT NULL UNIQUE REFERENCES events (id) ON DELETE CASCADE,
  amount            numeric,
  currency          text,
  source            text,
  campaign_id       uuid,
  campaign_send_id  uuid,
  created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sales_team_idx ON sales (team_id, created_at DESC, id DESC);
CREATE INDEX sales_contact_idx ON sales (contact_id, created_at DESC);

-- One row per (event, campaign): send, or skip with the reason. The unique key
-- makes a retried process_events job a no-op for what it already decided.
CREATE TABLE campaign_decisions (
  id                 uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id            uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  event_id           uuid NOT NULL REFERENCES events (id) ON DELETE CASCADE,
  campaign_id        uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
  campaign_send_id   uuid REFERENCES campaign_sends (id) ON DELETE SET NULL,
  contact_id         uuid REFERENCES contacts (id) ON DELETE CASCADE,
  decision           text NOT NULL CHECK (decision IN ('send', 'skip')),
  reason             text CHECK ((decision = 'send') = (reason IS NULL)),
  email_send_log_id  uuid REFERENCES email_send_log (id) ON DELETE SET NULL,
  -- The engine's clock (injectable in tests): cooldown and daily cap count
  -- send decisions by this time, not by commit time.
  decided_at         timestamptz NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  UNIQUE (event_id, campaign_id)
);
-- Cooldown and daily cap: the latest sends of one campaign to one contact.
CREATE INDEX campaign_decisions_sends_idx ON campaign_decisions (campaign_id, contact_id, decided_at DESC) WHERE decision = 'send';
CREATE INDEX campaign_decisions_team_idx ON campaign_decisions (team_id, created_at DESC);

-- Round-robin cursors: how many templates and accounts each send has handed out.
CREATE TABLE campaign_rotation (
  campaign_send_id  uuid PRIMARY KEY REFERENCES campaign_sends (id) ON DELETE CASCADE,
  team_id           uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  template_cursor   bigint NOT NULL DEFAULT 0,
  account_cursor    bigint NOT NULL DEFAULT 0
);

