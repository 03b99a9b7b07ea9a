-- The overview's sends and opens of the last seven days are read from the
-- statistics buckets now (src/dashboard/overview.ts), so the two indexes of
-- 0017 that served its capped log scans serve nothing. Every message handed to
-- a relay (sent_at set) and every counted open paid an index insertion for them.
DROP INDEX IF EXISTS email_send_log_team_sent_idx;
DROP INDEX IF EXISTS tracking_counted_team_open_idx;
