-- Automation sends (warm-up batches): iteration k lists the next batch of the
-- segment's contacts not yet listed by the send. `current_iteration` counts the
-- iterations whose list is complete, `iteration_listed` the messages listed so
-- far in the iteration being written (a job that runs again after a crash goes
-- on from there), `list_built` marks the last iteration listed. The
-- delivery-rate guard pauses the send with `pause_reason`; a start clears it
-- and lets the next iteration pass the guard once (`guard_passed_iteration`).
ALTER TABLE campaign_sends
  ADD COLUMN current_iteration integer NOT NULL DEFAULT 0,
  ADD COLUMN iteration_listed integer NOT NULL DEFAULT 0,
  ADD COLUMN pause_reason text CHECK (pause_reason IN ('delivery_rate')),
  ADD COLUMN guard_passed_iteration integer;
-- "Not yet listed by this send" probes campaign_decisions_list_entry_idx (0023).
