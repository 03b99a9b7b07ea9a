-- The webhook dispatcher's claim in one statement (src/webhooks/deliveries.ts,
-- claimDueDeliveries). It needs bitmap scans off: a queue table's statistics
-- are always stale, and with them the planner read and sorted every due row
-- for each claim where the ordered index scan with LIMIT stops at the limit.
-- As `SET LOCAL` that took a transaction: BEGIN, SET, the claim and COMMIT,
-- four round trips per claim, which a CPU profile of the worker put at 16 % of
-- its busy time at 6,000 deliveries/s. A function's own SET clause applies the
-- setting to its body only, so the claim is one autocommit statement.
-- The envelope is built by the caller around this function's rows.
CREATE FUNCTION plover_claim_webhook_deliveries(p_limit integer, p_lease_ms integer)
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
  )
  UPDATE webhook_deliveries d
  SET locked_until = CASE WHEN w.is_enabled
                       THEN date_trunc('milliseconds', now() + p_lease_ms * interval '1 millisecond') END,
      next_attempt_at = CASE WHEN w.is_enabled THEN d.next_attempt_at END
  FROM due, webhooks w
  WHERE d.id = due.id AND w.id = d.webhook_id
  RETURNING d.id, d.team_id, d.webhook_id, d.event_id, d.event, d.payload, d.sequence_attempts, d.max_attempts,
            w.url, w.secret_enc, d.locked_until, w.is_enabled
$$;
