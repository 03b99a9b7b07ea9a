-- The campaign decider's account count (src/campaigns/engine.ts) now reads what
-- the daily limit counts: today's SMTP claims (mail_account_usage, one row) plus
-- the account's event-triggered messages still waiting to be claimed. It used
-- to count the account's log rows created today through
-- email_send_log_account_day_idx: up to the campaign cap of rows for every batch
-- of decisions, with the account's row locked, so on an account of a high limit
-- the count grew with the day's mail (11 ms per batch after 20,000 e-mails in
-- bench/campaigns.ts). The new index holds only waiting messages; the old one
-- took a new entry at every update of a message (claim, result, tracking), since
-- `status <> 'cancelled'` holds for all of them.
--
-- `mail_account_id IS NOT NULL` keeps it to statements that name an account
-- (a condition on the column implies it): the claim and the send task find
-- their messages by id with the same status condition, and without it the
-- planner read this index, every waiting message of every account, for each
-- claim (bench/campaigns.ts: 3.9 ms per e-mail with 20,000 waiting, against
-- 0.09 by primary key).
CREATE INDEX email_send_log_account_pending_idx ON email_send_log (mail_account_id, event_id)
  WHERE status IN ('queued', 'deferred') AND mail_account_id IS NOT NULL;
DROP INDEX email_send_log_account_day_idx;
