-- Webhook pause and recover: a disabled webhook keeps its events as parked
-- deliveries (status 'pending', next_attempt_at NULL) until it is enabled again.

-- Pending deliveries per webhook, oldest first. Serves `pending_count` (an
-- index-only count), the paused-backlog bound (newest N, older than the age
-- limit) and the oldest-first order of the drain on enable. A row leaves it
-- when it stops being pending, so it holds the queue, not the log.
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (webhook_id, created_at, id) WHERE status = 'pending';

-- The claim's index without the parked rows: a paused backlog of 100,000 rows
-- was 100,000 NULL entries of the due index, written on every fan-out to a
-- disabled webhook and never read. `next_attempt_at <= now()` implies NOT
-- NULL, so the claim and the next-due probe still use it.
CREATE INDEX webhook_deliveries_due_only_idx ON webhook_deliveries (next_attempt_at)
  WHERE status = 'pending' AND next_attempt_at IS NOT NULL;
DROP INDEX webhook_deliveries_due_idx;
