-- Dashboard counts read from the statistics buckets now (src/stats/): the
-- overview's sends and opens of the last seven days (src/dashboard/overview.ts)
-- and each campaign's sent, opened, clicked and bounced (src/dashboard/queries.ts).
-- The indexes that served their scans of the message log serve nothing, and
-- every message handed to a relay, every first open or click and every status
-- change paid an index insertion for them.
DROP INDEX IF EXISTS email_send_log_team_sent_idx;
DROP INDEX IF EXISTS tracking_counted_team_open_idx;
DROP INDEX IF EXISTS dashboard_send_log_campaign_stats_idx;
