-- webhook_deliveries_event_idx (0012) served the lookups by event_id: the
-- foreign key's ON DELETE SET NULL when retention deletes an event, retention's
-- check for pending deliveries, erasure. UNIQUE (event_id, webhook_id) (0003)
-- leads with the same column and serves every one of them, so the partial index
-- was a second copy, written at each delivery's insert and again at its claim
-- and its result (both non-HOT updates): three index insertions per delivery.
-- test/webhooks/delivery-indexes.test.ts checks that those lookups still use an index.
DROP INDEX IF EXISTS webhook_deliveries_event_idx;
