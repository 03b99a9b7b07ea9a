-- The dashboard's overview (src/dashboard/overview.ts) counts a team's sends
-- and opens of the last seven days. These two indexes make both counts
-- index-only range scans of that window, whatever the team's history holds.
-- A message enters the first once, when it is handed to the relay (sent_at is
-- set once); the second holds only open rows.
CREATE INDEX email_send_log_team_sent_idx ON email_send_log (team_id, sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX tracking_counted_team_open_idx ON tracking_counted (team_id, counted_at) INCLUDE (email_send_log_id, is_bot)
  WHERE kind = 'open';
