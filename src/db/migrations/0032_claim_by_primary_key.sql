-- The claim function of 0029, with its claimed rows reached by primary key.
-- A SQL function's statement is planned without its arguments' values (a
-- generic plan): `LIMIT p_limit` was estimated at a tenth of the pending rows,
-- and for that many the planner joined them back to webhook_deliveries by a
-- hash join over a sequential scan of the whole table. EXPLAIN ANALYZE of the
-- function's statement as a generic plan, 65,000 deliveries in the table:
-- 89 ms for a claim of 100, 76 of them reading every row of the log (9 ms with
-- the limit's value known). The log keeps delivered rows for the retention
-- period, so a claim grew with the log. `= ANY (ARRAY(…))` of the claimed ids
-- is an index probe per id whatever the estimate; the rows are returned
-- oldest due first, as the join to `due` returned them; the rest is unchanged.
-- test/webhooks/claim.test.ts checks the plan of the function's statement.
CREATE OR REPLACE FUNCTION plover_claim_webhook_deliveries(p_limit integer, p_lease_ms integer)
RETURNS TABLE (
  id uuid, team_id uuid, webhook_id uuid, event_id uuid, event text, payload json,
  sequence_attempts integer, max_attempts integer, url text, secret_enc bytea,
  lease timestamptz, is_enabled boolean
)
LANGUAGE sql
VOLATILE
SET enable_bitmapscan = off
AS $$
  WITH due AS (
    SELECT d.id
    FROM webhook_deliveries d
    WHERE d.status = 'pending' AND d.next_attempt_at <= now()
      AND (d.locked_until IS NULL OR d.locked_until < now())
    ORDER BY d.next_attempt_at
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  ), claimed AS (
    UPDATE webhook_deliveries d
    SET locked_until = CASE WHEN w.is_enabled
                         THEN date_trunc('milliseconds', now() + p_lease_ms * interval '1 millisecond') END,
        next_attempt_at = CASE WHEN w.is_enabled THEN d.next_attempt_at END
    FROM webhooks w
    WHERE d.id = ANY (ARRAY(SELECT due.id FROM due)) AND w.id = d.webhook_id
    RETURNING d.id, d.team_id, d.webhook_id, d.event_id, d.event, d.payload, d.sequence_attempts, d.max_attempts,
              w.url, w.secret_enc, d.locked_until, w.is_enabled, d.next_attempt_at AS due_at
  )
  -- Oldest due first, as before (the rows come from the index probe in id order).
  SELECT c.id, c.team_id, c.webhook_id, c.event_id, c.event, c.payload, c.sequence_attempts, c.max_attempts,
         c.url, c.secret_enc, c.locked_until, c.is_enabled
  FROM claimed c ORDER BY c.due_at NULLS LAST, c.id
$$;
