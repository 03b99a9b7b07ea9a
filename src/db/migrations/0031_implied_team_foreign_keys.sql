-- Three append-heavy tables had a foreign key to teams that another of their
-- keys already implies, each NOT NULL and ON DELETE CASCADE to a table that
-- itself cascades from teams:
--   webhook_deliveries.webhook_id -> webhooks -> teams
--   campaign_decisions.campaign_id -> campaigns -> teams
--   tracking_hits.email_send_log_id -> email_send_log -> teams
-- so deleting a team still deletes their rows, through those parents. Each
-- check was an SPI query and a KEY SHARE lock on the team's row for every
-- row inserted (the lock a MultiXact as soon as two of the team's
-- transactions overlap): for a fan-out of 500 events to 10 webhooks, 43 of its
-- 345 ms (EXPLAIN ANALYZE's trigger times). The columns stay: every query is
-- scoped by them, and every insert takes team_id from the parent row it links
-- (or a parent matched on it). test/db/team-cascade.test.ts holds the schema
-- to this rule for every table with a team_id; test/webhooks/
-- delivery-indexes.test.ts deletes a team and finds none of its deliveries.
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_team_id_fkey;
ALTER TABLE campaign_decisions DROP CONSTRAINT IF EXISTS campaign_decisions_team_id_fkey;
ALTER TABLE tracking_hits DROP CONSTRAINT IF EXISTS tracking_hits_team_id_fkey;
