-- Dashboard users (team members who sign in with e-mail and password), their
-- sessions and one-time password-set links (issue 6).

-- E-mail is stored lower-cased and unique across the service: one address signs
-- in to one team. password_hash is NULL until the user sets a password through a
-- one-time link. Format: scrypt$N$r$p$salt$hash (base64url).
CREATE TABLE dashboard_users (
  id             uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id        uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  email          text NOT NULL UNIQUE CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 320),
  password_hash  text,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_users_team_idx ON dashboard_users (team_id);

-- A session row per sign-in. The cookie carries a random token; only its SHA-256
-- is stored, so a database read does not yield live sessions. Sign-out deletes
-- the row, and deleting a user's rows signs them out everywhere.
CREATE TABLE dashboard_sessions (
  id            uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  user_id       uuid NOT NULL REFERENCES dashboard_users (id) ON DELETE CASCADE,
  token_hash    bytea NOT NULL UNIQUE,
  created_at    timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_user_idx ON dashboard_sessions (user_id);

-- One-time links to set a password. user_id is NULL for the first-start link,
-- which creates the team's first user with the e-mail typed on the page.
CREATE TABLE dashboard_password_tokens (
  id           uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id      uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  user_id      uuid REFERENCES dashboard_users (id) ON DELETE CASCADE,
  token_hash   bytea NOT NULL UNIQUE,
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  used_at      timestamptz
);

-- The campaigns page counts sent/opened/clicked/bounced per campaign from the
-- send log. This covering index lets those counts be index-only scans instead
-- of heap reads of wide log rows (measured: 74 ms → see docs/dashboard.md for a
-- page of 20 campaigns over 100,000 log rows).
CREATE INDEX dashboard_send_log_campaign_stats_idx
  ON email_send_log (campaign_id) INCLUDE (team_id, status, sent_at, first_opened_at, first_clicked_at);
