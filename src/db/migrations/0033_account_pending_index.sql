-- The campaign decider's account count (src/campaigns/engine.ts) now reads what
-- the daily limit counts: today's SMTP claims (mail_account_usage, one row) plus
-- the account's messages waiting to be claimed ahead of a new decision
-- (event-triggered and transactional ones). It used to count the account's log
-- rows created today through email_send_log_account_day_idx: up to the campaign
-- cap of rows for every batch of decisions, with the account's row locked, so on
-- an account of a high limit the count grew with the day's mail (11 ms per batch
-- after 20,000 e-mails in bench/campaigns.ts). The new index holds those waiting
-- messages only; the old one took a new entry at every update of a message
-- (claim, result, tracking), since `status <> 'cancelled'` holds for all of them.
--
-- Only messages that name an account are in it (`mail_account_id IS NOT NULL`,
-- implied by any condition on the column), so a statement that finds messages
-- by id with the same status condition (the claim, the send task) cannot read
-- it: with an index of the bare status condition the planner read all of it,
-- every waiting message of every account, for each claim (bench/campaigns.ts:
-- 3.9 ms per e-mail with 20,000 waiting, against 0.09 by primary key). Its
-- second column is the decider's condition, so the count reads only the
-- messages it counts (a broadcast's backlog can be far larger), and deleting an
-- account, which cancels all of its waiting messages, reads them all by the
-- first column.
CREATE INDEX email_send_log_account_pending_idx
  ON email_send_log (mail_account_id, ((event_id IS NOT NULL OR source = 'transactional')))
  WHERE status IN ('queued', 'deferred') AND mail_account_id IS NOT NULL;
DROP INDEX email_send_log_account_day_idx;
