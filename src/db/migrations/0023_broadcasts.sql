-- Broadcast campaigns: a send is `scheduled` until its start time, `sending`
-- while its recipient list is built and sent, then `completed`; `cancelled`
-- ends it early. The recipient list is written in keyset batches by contact
-- id; `list_cursor` is the last contact id a committed batch covered, so a
-- batch job that runs again (a crash, a duplicate) continues after it.
ALTER TABLE campaign_sends DROP CONSTRAINT campaign_sends_status_check;
ALTER TABLE campaign_sends ADD CONSTRAINT campaign_sends_status_check
  CHECK (status IN ('active', 'paused', 'completed', 'failed', 'scheduled', 'sending', 'cancelled'));
ALTER TABLE campaign_sends
  ADD COLUMN list_cursor uuid,
  ADD COLUMN list_built boolean NOT NULL DEFAULT false,
  ADD COLUMN total_recipients integer NOT NULL DEFAULT 0;

-- A list entry (a broadcast's recipient, sent or skipped) has no event: at
-- most one per (send, contact). Event-triggered decisions may repeat per contact.
ALTER TABLE campaign_decisions ADD COLUMN list_entry boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX campaign_decisions_list_entry_idx
  ON campaign_decisions (campaign_send_id, contact_id) WHERE list_entry;

-- Progress of a send (remaining, sent, bounced) is read per campaign send.
CREATE INDEX email_send_log_campaign_send_idx ON email_send_log (campaign_send_id, status) WHERE campaign_send_id IS NOT NULL;

-- Messages per minute a mail account may hand to its SMTP server (null: no limit).
ALTER TABLE mail_accounts ADD COLUMN max_per_minute integer CHECK (max_per_minute IS NULL OR max_per_minute > 0);

-- The per-minute count of an account: one row per account, reset when the minute changes.
CREATE TABLE mail_account_minute_usage (
  mail_account_id uuid PRIMARY KEY REFERENCES mail_accounts (id) ON DELETE CASCADE,
  minute          timestamptz NOT NULL,
  claimed         integer NOT NULL
);
