-- Retention (src/ops/retention.ts) and webhook auto-disable (src/webhooks/auto-disable.ts).

-- Leads, sales and campaign decisions outlive the events that created them:
-- retention unlinks them (event_id NULL) instead of cascading the delete.
-- Their unique keys on event_id still hold (NULLs are distinct).
ALTER TABLE leads ALTER COLUMN event_id DROP NOT NULL,
  DROP CONSTRAINT leads_event_id_fkey,
  ADD CONSTRAINT leads_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE SET NULL;
ALTER TABLE sales ALTER COLUMN event_id DROP NOT NULL,
  DROP CONSTRAINT sales_event_id_fkey,
  ADD CONSTRAINT sales_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE SET NULL;
ALTER TABLE campaign_decisions ALTER COLUMN event_id DROP NOT NULL,
  DROP CONSTRAINT campaign_decisions_event_id_fkey,
  ADD CONSTRAINT campaign_decisions_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE SET NULL;

-- Retention deletes oldest first by created_at, a few thousand rows per
-- statement; without these each batch would scan the table.
CREATE INDEX events_created_idx ON events (created_at);
CREATE INDEX email_send_log_created_idx ON email_send_log (created_at);
CREATE INDEX tracking_hits_created_idx ON tracking_hits (created_at);
CREATE INDEX webhook_deliveries_done_created_idx ON webhook_deliveries (created_at) WHERE status <> 'pending';

-- Deleting an event or a message sets these references to NULL; without an
-- index on the referencing column each deleted row would scan the table.
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_id) WHERE event_id IS NOT NULL;
CREATE INDEX email_send_log_event_idx ON email_send_log (event_id) WHERE event_id IS NOT NULL;
CREATE INDEX tracking_hits_event_idx ON tracking_hits (event_id) WHERE event_id IS NOT NULL;
CREATE INDEX campaign_decisions_send_log_idx ON campaign_decisions (email_send_log_id) WHERE email_send_log_id IS NOT NULL;

-- Auto-disable: the failing streak since the last success, kept by the
-- dispatcher as it records attempts, so the daily check reads one row per
-- webhook instead of its delivery log.
ALTER TABLE webhooks
  ADD COLUMN failing_since timestamptz,
  ADD COLUMN last_failure_at timestamptz,
  ADD COLUMN failures_since_success integer NOT NULL DEFAULT 0,
  -- Set when the service disabled the webhook for failing (the dashboard's banner); cleared on enable.
  ADD COLUMN auto_disabled_at timestamptz;
CREATE INDEX webhooks_failing_idx ON webhooks (failing_since) WHERE is_enabled AND failing_since IS NOT NULL;
