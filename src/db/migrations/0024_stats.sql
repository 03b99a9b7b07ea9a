-- Mail statistics (the stats routes, the dashboard's charts, account health):
-- counts per 15-minute bucket, per team, per source (campaign or
-- transactional), campaign and mail account. 15 minutes, so that every time
-- zone's hours and days are whole buckets.
--
-- Writers never touch a bucket row: a send, a bounce, a first open or click of
-- a verdict, an unsubscribe, a complaint, a reply adds a delta row (in the
-- transaction that records the fact), and the stats_fold job moves deltas into
-- the buckets (DELETE ... RETURNING, then one upsert). Readers add the buckets
-- and the deltas not yet folded, in one statement, so every answer is exact.
-- A bucket row written by many concurrent senders would be a hot row; deltas
-- are appends.
CREATE TABLE stats_deltas (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  team_id          uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  source           text NOT NULL CHECK (source IN ('campaign', 'transactional')),
  -- Null for transactional mail. No foreign keys: a deleted campaign's or
  -- account's counts stay until their team goes (they are reached by id only).
  campaign_id      uuid,
  mail_account_id  uuid,
  bucket           timestamptz NOT NULL,
  sent             integer NOT NULL DEFAULT 0,
  delivered        integer NOT NULL DEFAULT 0,
  bounced_hard     integer NOT NULL DEFAULT 0,
  bounced_soft     integer NOT NULL DEFAULT 0,
  deferred         integer NOT NULL DEFAULT 0,
  opened_human     integer NOT NULL DEFAULT 0,
  opened_bot       integer NOT NULL DEFAULT 0,
  clicked_human    integer NOT NULL DEFAULT 0,
  clicked_bot      integer NOT NULL DEFAULT 0,
  unsubscribed     integer NOT NULL DEFAULT 0,
  complained       integer NOT NULL DEFAULT 0,
  replied          integer NOT NULL DEFAULT 0
);
-- Reads add the unfolded deltas of one team (a minute's worth at most, normally).
CREATE INDEX stats_deltas_team_idx ON stats_deltas (team_id);

CREATE TABLE stats_buckets (
  team_id          uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  source           text NOT NULL CHECK (source IN ('campaign', 'transactional')),
  campaign_id      uuid,
  mail_account_id  uuid,
  bucket           timestamptz NOT NULL,
  sent             bigint NOT NULL DEFAULT 0,
  delivered        bigint NOT NULL DEFAULT 0,
  bounced_hard     bigint NOT NULL DEFAULT 0,
  bounced_soft     bigint NOT NULL DEFAULT 0,
  deferred         bigint NOT NULL DEFAULT 0,
  opened_human     bigint NOT NULL DEFAULT 0,
  opened_bot       bigint NOT NULL DEFAULT 0,
  clicked_human    bigint NOT NULL DEFAULT 0,
  clicked_bot      bigint NOT NULL DEFAULT 0,
  unsubscribed     bigint NOT NULL DEFAULT 0,
  complained       bigint NOT NULL DEFAULT 0,
  replied          bigint NOT NULL DEFAULT 0,
  -- Campaign reads and transactional reads use this index's prefix.
  CONSTRAINT stats_buckets_key UNIQUE NULLS NOT DISTINCT (team_id, source, campaign_id, mail_account_id, bucket)
);
CREATE INDEX stats_buckets_account_idx ON stats_buckets (team_id, mail_account_id, bucket);

-- Account health (email.account.health): the state last announced per account.
ALTER TABLE mail_accounts ADD COLUMN health_state text NOT NULL DEFAULT 'ok' CHECK (health_state IN ('ok', 'warning', 'critical'));

-- What the log already holds, once: messages handed to a relay and their
-- bounces and deliveries, first opens and clicks per verdict (from the stored
-- hits), complaints and replies. Deferrals and unsubscribes before this
-- migration are not recoverable per message and start at zero.
WITH facts AS (
  SELECT l.team_id, l.source, l.campaign_id, l.mail_account_id, coalesce(l.sent_at, l.bounced_at, l.updated_at) AS at,
         1 AS sent, 0 AS delivered, 0 AS bounced_hard, 0 AS bounced_soft, 0 AS opened_human, 0 AS opened_bot,
         0 AS clicked_human, 0 AS clicked_bot, 0 AS complained, 0 AS replied
    FROM email_send_log l WHERE l.status IN ('sent', 'delivered', 'bounced_hard', 'bounced_soft')
  UNION ALL
  SELECT l.team_id, l.source, l.campaign_id, l.mail_account_id, coalesce(l.bounced_at, l.updated_at),
         0, 0, (l.status = 'bounced_hard')::int, (l.status = 'bounced_soft')::int, 0, 0, 0, 0, 0, 0
    FROM email_send_log l WHERE l.status IN ('bounced_hard', 'bounced_soft')
  UNION ALL
  SELECT l.team_id, l.source, l.campaign_id, l.mail_account_id, l.delivered_at, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0
    FROM email_send_log l WHERE l.delivered_at IS NOT NULL
  UNION ALL
  SELECT l.team_id, l.source, l.campaign_id, l.mail_account_id, h.at, 0, 0, 0, 0,
         (h.kind = 'open' AND NOT h.is_bot)::int, (h.kind = 'open' AND h.is_bot)::int,
         (h.kind = 'click' AND NOT h.is_bot)::int, (h.kind = 'click' AND h.is_bot)::int, 0, 0
    FROM (SELECT email_send_log_id, CASE WHEN kind = 'open' THEN 'open' ELSE 'click' END AS kind, is_bot, min(created_at) AS at
            FROM tracking_hits GROUP BY 1, 2, 3) h
    JOIN email_send_log l ON l.id = h.email_send_log_id
  UNION ALL
  SELECT l.team_id, l.source, l.campaign_id, l.mail_account_id, f.at, 0, 0, 0, 0, 0, 0, 0, 0,
         (f.kind = 'complaint')::int, (f.kind = 'reply')::int
    FROM (SELECT email_send_log_id, kind, min(occurred_at) AS at FROM message_feedback
           WHERE kind IN ('complaint', 'reply') GROUP BY 1, 2) f
    JOIN email_send_log l ON l.id = f.email_send_log_id
)
INSERT INTO stats_buckets (team_id, source, campaign_id, mail_account_id, bucket, sent, delivered, bounced_hard, bounced_soft,
                           opened_human, opened_bot, clicked_human, clicked_bot, complained, replied)
SELECT team_id, source, campaign_id, mail_account_id,
       date_bin('15 minutes', at, TIMESTAMPTZ '2000-01-01 00:00:00+00'),
       sum(sent), sum(delivered), sum(bounced_hard), sum(bounced_soft), sum(opened_human), sum(opened_bot),
       sum(clicked_human), sum(clicked_bot), sum(complained), sum(replied)
  FROM facts WHERE at IS NOT NULL
 GROUP BY 1, 2, 3, 4, 5;
