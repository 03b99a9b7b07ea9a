-- The campaigns a trigger event may start, by team: every contact saved and
-- every lead or sale recorded asks whether a campaign of its team lists the
-- event (events/emit.ts, campaignListensSql: without one the event gets no
-- process_events job). Broadcasts and automations have no trigger events, and
-- a team may keep thousands of them: through campaigns_team_idx the check
-- would read every one of the team's campaigns for each event that finds none.
-- This index holds only the campaigns that can be triggered, not deleted.
CREATE INDEX campaigns_trigger_idx ON campaigns (team_id)
  WHERE deleted_at IS NULL AND cardinality(trigger_events) > 0;
