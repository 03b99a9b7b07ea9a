-- The contact timeline (GET /email/contacts/{id}/timeline): one ordered index
-- per source on (contact_id, time, id), so a page reads at most page size + 1
-- entries of each source whatever the contact's history (keyset, no OFFSET,
-- no scan of all the contact's rows). Where an older single-column or
-- unordered contact index existed it is replaced (the new one still serves the
-- ON DELETE SET NULL / CASCADE lookups of a contact delete).

-- Business events and the message events (sent, deferred, bounced, delivered,
-- complained, replied). Opens and clicks come from tracking_hits (with their
-- verdict and signals), so their event rows stay out of this index.
-- (events_contact_idx stays for the delete lookups, which name no event.)
CREATE INDEX events_contact_time_idx ON events (contact_id, occurred_at, id)
  WHERE contact_id IS NOT NULL AND name NOT IN ('email.opened', 'email.clicked', 'email.bot.opened', 'email.bot.clicked');

DROP INDEX IF EXISTS email_send_log_contact_idx;
CREATE INDEX email_send_log_contact_idx ON email_send_log (contact_id, created_at, id);
-- A message's end without an event of its own (failed, cancelled): at its last change.
CREATE INDEX email_send_log_contact_ended_idx ON email_send_log (contact_id, updated_at, id)
  WHERE contact_id IS NOT NULL AND status IN ('failed', 'cancelled');

DROP INDEX IF EXISTS campaign_decisions_contact_idx;
CREATE INDEX campaign_decisions_contact_idx ON campaign_decisions (contact_id, decided_at, id);

DROP INDEX IF EXISTS tracking_hits_contact_idx;
CREATE INDEX tracking_hits_contact_idx ON tracking_hits (contact_id, created_at, id) WHERE contact_id IS NOT NULL;

-- Webhook deliveries name the contact of their event (set at fan-out), so the
-- contact's deliveries are one index range, not a join through all its events.
ALTER TABLE webhook_deliveries ADD COLUMN contact_id uuid;
UPDATE webhook_deliveries d SET contact_id = e.contact_id
  FROM events e WHERE e.id = d.event_id AND e.contact_id IS NOT NULL;
CREATE INDEX webhook_deliveries_contact_idx ON webhook_deliveries (contact_id, created_at, id) WHERE contact_id IS NOT NULL;
