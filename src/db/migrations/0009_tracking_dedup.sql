-- Tracking hits are counted once per (message, link, verdict) per hour: the
-- first hit moves the counters and emits the event (and so the webhook
-- delivery); a replay of the same link only raises the message's raw hit
-- total below. Mailbox providers fetch through shared proxies, so this is not
-- a per-IP limit.

-- The raw totals: every hit on the message's tracking URLs, counted or not,
-- stored or not (hit rows per message are capped). Honeypot hits count as
-- click hits: the honeypot is a link of the message. bigint: a replay loop
-- must not be able to overflow them.
ALTER TABLE email_send_log
  ADD COLUMN open_hits_count  bigint NOT NULL DEFAULT 0,
  ADD COLUMN click_hits_count bigint NOT NULL DEFAULT 0;

-- Until now every hit was stored, so the stored rows are the raw totals.
UPDATE email_send_log l
   SET open_hits_count = h.opens, click_hits_count = h.clicks
  FROM (SELECT email_send_log_id,
               count(*) FILTER (WHERE kind = 'open') AS opens,
               count(*) FILTER (WHERE kind <> 'open') AS clicks
          FROM tracking_hits GROUP BY email_send_log_id) h
 WHERE l.id = h.email_send_log_id;

-- When each (message, kind, link, verdict) last counted. One row per link of a
-- message and verdict, so it stays as small as the messages' links, and it
-- does not depend on the capped, purgeable hit rows. `link` is the md5 of the
-- click target (a URL can be longer than an index entry may be); for opens and
-- the honeypot, of the empty string.
CREATE TABLE tracking_counted (
  email_send_log_id uuid NOT NULL REFERENCES email_send_log (id) ON DELETE CASCADE,
  team_id           uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  kind              text NOT NULL CHECK (kind IN ('open', 'click', 'honeypot')),
  link              uuid NOT NULL,
  is_bot            boolean NOT NULL,
  counted_at        timestamptz NOT NULL,
  PRIMARY KEY (email_send_log_id, kind, link, is_bot)
);
