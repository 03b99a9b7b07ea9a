-- The dashboard's campaign page lists a campaign's decisions newest first, a
-- page at a time (keyset on created_at, id): without this index each page
-- would read and sort every decision of the campaign.
CREATE INDEX campaign_decisions_campaign_idx ON campaign_decisions (campaign_id, created_at DESC, id DESC);
