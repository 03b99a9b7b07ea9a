-- Campaign decisions are taken for batches of pending trigger events
-- (src/campaigns/engine.ts): the job of one event also decides the other
-- events of its team that are waiting, so a burst of single-event jobs becomes
-- a few set-based transactions instead of one per event, each queueing on the
-- same mail-account lock. decided_at marks an event whose decisions are
-- recorded (set in the deciding transaction); the partial index finds the
-- waiting ones and stays as small as the backlog.
ALTER TABLE events ADD COLUMN decided_at timestamptz;

-- Events processed before this migration were decided by their own job.
UPDATE events SET decided_at = processed_at
 WHERE processed_at IS NOT NULL AND contact_id IS NOT NULL AND name IN ('contact.saved', 'lead.created', 'sale.created');

-- The name list is spelled out in the query too (engine.ts): the planner uses a
-- partial index only when it can prove the query's condition implies its predicate.
CREATE INDEX events_undecided_idx ON events (team_id, occurred_at, id)
 WHERE decided_at IS NULL AND contact_id IS NOT NULL AND name IN ('contact.saved', 'lead.created', 'sale.created');
