-- Webhook delivery statistics (each webhook's dashboard chart): attempts per
-- 15-minute bucket, how many got a 2xx, and a latency histogram, so the chart
-- reads a handful of bucket rows instead of the attempt logs of every delivery
-- of the period (it read the newest 10,000 deliveries' logs: about 90 ms of a
-- 100 ms page budget at 100,000 deliveries, and it could not count past them).
--
-- Latency is kept as a histogram: one row per (bucket, bin), bin =
-- floor(8 * log2(1 + duration_ms)), eight bins per doubling (each about 9 %
-- wide), capped at 159 (about 16 minutes, beyond any attempt's timeout). The
-- page's median and 95th percentile are read from the bins, interpolated
-- inside the one that holds them.
--
-- Same mechanism as the mail statistics (0024): recording an attempt adds a
-- delta row in the same statement, the stats_fold job moves deltas into the
-- buckets, and reads add both. No foreign key on webhook_id: a deleted
-- webhook's page is gone (404) and its few rows go with its team.
CREATE TABLE webhook_stats_deltas (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  webhook_id  uuid NOT NULL,
  bucket      timestamptz NOT NULL,
  bin         smallint NOT NULL,
  attempts    integer NOT NULL,
  succeeded   integer NOT NULL
);
CREATE INDEX webhook_stats_deltas_webhook_idx ON webhook_stats_deltas (webhook_id, bucket);

CREATE TABLE webhook_stats_buckets (
  team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  webhook_id  uuid NOT NULL,
  bucket      timestamptz NOT NULL,
  bin         smallint NOT NULL,
  attempts    bigint NOT NULL,
  succeeded   bigint NOT NULL,
  PRIMARY KEY (webhook_id, bucket, bin)
);
CREATE INDEX webhook_stats_buckets_team_idx ON webhook_stats_buckets (team_id);

-- What the attempt logs already hold, once.
INSERT INTO webhook_stats_buckets (team_id, webhook_id, bucket, bin, attempts, succeeded)
SELECT d.team_id, d.webhook_id,
       date_bin('15 minutes', (e ->> 'at')::timestamptz, TIMESTAMPTZ '2000-01-01 00:00:00+00'),
       least(159, floor(8 * ln(1 + greatest(0, coalesce((e ->> 'duration_ms')::float8, 0))) / ln(2)))::smallint,
       count(*), count(*) FILTER (WHERE (e ->> 'response_code')::int BETWEEN 200 AND 299)
  FROM webhook_deliveries d, jsonb_array_elements(d.attempt_log) e
 WHERE e ->> 'at' IS NOT NULL
 GROUP BY 1, 2, 3, 4;
