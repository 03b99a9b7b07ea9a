-- Dashboard CSV imports (issue 15): the uploaded file waits on disk, a
-- contact_import job (priority +2) reads it with the CLI's import code, and
-- this row carries its progress and result for the page that shows them.
CREATE TABLE contact_imports (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  team_id uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
  file_name text NOT NULL,
  file_path text NOT NULL,
  bytes bigint NOT NULL,
  -- Lines of the upload less the header: rows, unless fields hold newlines.
  rows_estimate integer NOT NULL,
  emit_events boolean NOT NULL DEFAULT false,
  rows_done integer NOT NULL DEFAULT 0,
  rejected integer NOT NULL DEFAULT 0,
  created integer NOT NULL DEFAULT 0,
  updated integer NOT NULL DEFAULT 0,
  unchanged integer NOT NULL DEFAULT 0,
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz
);
CREATE INDEX contact_imports_team_idx ON contact_imports (team_id, created_at DESC);
