-- The contacts API (issue 18): listing with filters, and erasing an address
-- everywhere. Every list is newest first (created_at DESC, id DESC) within a team.

-- status filter: an ordered scan of one status of one team, no sort.
CREATE INDEX contacts_team_status_created_idx ON contacts (team_id, status, created_at DESC, id DESC);
-- search by e-mail prefix (`email LIKE 'ada%'`): the unique (team_id, email)
-- index uses the database's collation, which LIKE cannot range-scan unless it is C.
CREATE INDEX contacts_team_email_prefix_idx ON contacts (team_id, email text_pattern_ops);
-- tag filter (`tags @> ARRAY['vip']`), combined with the team's rows by a bitmap AND.
CREATE INDEX contacts_tags_idx ON contacts USING gin (tags);

-- Erasure finds an address's rows without scanning a table:
-- messages by address (a transactional recipient need not be a contact; also
-- serves the message list's `to_email` filter) ...
CREATE INDEX email_send_log_team_email_idx ON email_send_log (team_id, email);
-- ... and events by the address their payload names (every event about a
-- person carries `email`: contact.*, lead, sale and email.* events).
CREATE INDEX events_team_email_idx ON events (team_id, (payload ->> 'email')) WHERE payload ? 'email';

-- Deleting a contact sets these references to NULL or deletes the rows; without
-- an index on the referencing column each deleted contact scans the table.
CREATE INDEX events_contact_idx ON events (contact_id) WHERE contact_id IS NOT NULL;
CREATE INDEX tracking_hits_contact_idx ON tracking_hits (contact_id) WHERE contact_id IS NOT NULL;
CREATE INDEX campaign_decisions_contact_idx ON campaign_decisions (contact_id);
