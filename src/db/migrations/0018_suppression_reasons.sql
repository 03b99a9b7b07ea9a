-- The suppression list a team can see and edit (issue 14).
--
-- `reasons`: every reason ever recorded for the address, strongest first;
-- `reason` stays the strongest, the one in force. The memory is what keeps a
-- removal honest: a team that adds `manual` on top of a recipient's
-- unsubscribe and then removes its own entry must find the unsubscribe still
-- there, not an address free to mail (src/contacts/suppressions.ts).
ALTER TABLE suppressions ADD COLUMN reasons text[] NOT NULL DEFAULT '{}';
UPDATE suppressions SET reasons = ARRAY[reason];

-- GET /email/suppressions pages newest first (created_at DESC, id DESC).
CREATE INDEX suppressions_team_created_idx ON suppressions (team_id, created_at DESC, id DESC);
