-- When a deferred message's retry is due (mail/send-record.ts writes it with
-- the deferral, the same moment its retry job is due). A send job loads a
-- deferred message only once it is due: a job that failed after recording its
-- results, and is run again by graphile-worker seconds later, found the
-- message `deferred` and sent it again at once, long before its retry delay.
-- Null (messages deferred before this migration): due, as before. Adding a
-- nullable column without a default rewrites nothing.
ALTER TABLE email_send_log ADD COLUMN retry_at timestamptz;
