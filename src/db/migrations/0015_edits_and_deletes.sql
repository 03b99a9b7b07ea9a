-- Updates and deletes of templates, campaigns and mail accounts (issue 18),
-- and simulated webhook deliveries marked as such.

-- Every content change of a template makes a new version: the template row
-- holds the current one (what the next send renders), template_versions the
-- earlier ones, newest kept (src/templates/queries.ts, TEMPLATE_VERSIONS_KEPT).
ALTER TABLE templates ADD COLUMN version integer NOT NULL DEFAULT 1;
CREATE TABLE template_versions (
  template_id  uuid NOT NULL REFERENCES templates (id) ON DELETE CASCADE,
  team_id      uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  version      integer NOT NULL,
  name         text NOT NULL,
  subject      text,
  content      text NOT NULL,
  alt_content  text NOT NULL,
  meta         jsonb NOT NULL,
  -- When this version was made (the template's updated_at at the time).
  created_at   timestamptz NOT NULL,
  -- When the next version replaced it.
  replaced_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (template_id, version)
);

-- A campaign or mail account that the message log references is deleted
-- softly: the row stays (the log's rows keep their campaign and account, for
-- stats) and every read leaves it out. One that nothing references is deleted.
ALTER TABLE campaigns ADD COLUMN deleted_at timestamptz;
ALTER TABLE mail_accounts ADD COLUMN deleted_at timestamptz;

-- Deliveries made by POST /webhooks/simulate: a test, not an event.
ALTER TABLE webhook_deliveries ADD COLUMN simulated boolean NOT NULL DEFAULT false;
