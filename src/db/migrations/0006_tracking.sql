-- One row per hit on a tracking URL of a sent message (open pixel, click
-- redirect, honeypot link), with the bot decision taken for it. Bot detection
-- reads the previous hits of the same send (rapid multi-click, honeypot
-- followed); the dashboard and support read them to explain a decision.
-- Hits are recorded only when the send's open_tracking/click_tracking allow it
-- (honeypot hits always: they are evidence, not engagement).
CREATE TABLE tracking_hits (
  id                 uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id            uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  email_send_log_id  uuid NOT NULL REFERENCES email_send_log (id) ON DELETE CASCADE,
  contact_id         uuid REFERENCES contacts (id) ON DELETE SET NULL,
  kind               text NOT NULL CHECK (kind IN ('open', 'click', 'honeypot')),
  method             text NOT NULL,
  -- The signed target of a click; null for opens and honeypot hits.
  url                text,
  -- Text, not inet: whatever the proxy chain gave us is kept as seen.
  ip                 text,
  user_agent         text,
  is_bot             boolean NOT NULL,
  bot_score          double precision NOT NULL CHECK (bot_score BETWEEN 0 AND 1),
  reasons            text[] NOT NULL DEFAULT '{}',
  -- Recognised scanner or privacy proxy (e.g. 'barracuda', 'google_image_proxy').
  fingerprint        text,
  -- The email.opened / email.clicked / email.bot.* event this hit emitted.
  event_id           uuid REFERENCES events (id) ON DELETE SET NULL,
  created_at         timestamptz NOT NULL DEFAULT now()
);
-- "Other links of this send clicked in the last 2 s" and "honeypot followed":
-- both read one send's hits by kind and time.
CREATE INDEX tracking_hits_send_idx ON tracking_hits (email_send_log_id, kind, created_at DESC);
CREATE INDEX tracking_hits_team_idx ON tracking_hits (team_id, created_at DESC, id DESC);
