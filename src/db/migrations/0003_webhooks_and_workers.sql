-- Outbound webhooks (docs/api.md, "Webhooks").
CREATE TABLE webhooks (
  id               uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id          uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  url              text NOT NULL,
  events           text[] NOT NULL,
  -- AES-256-GCM ciphertext of the signing secret (SecretBox purpose 'webhook-secret').
  secret_enc       bytea NOT NULL,
  is_enabled       boolean NOT NULL DEFAULT true,
  source           text CHECK (source IN ('n8n', 'zapier', 'make', 'internal')),
  description      text,
  -- Why the service itself disabled the webhook (e.g. the receiver answered 410 Gone).
  disabled_reason  text,
  last_success_at  timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_team_idx ON webhooks (team_id, created_at DESC, id DESC);
-- Fan-out looks up the enabled webhooks of a team for every batch of events.
CREATE INDEX webhooks_enabled_idx ON webhooks (team_id) WHERE is_enabled;

-- The delivery log and the delivery queue in one: one row per (event, webhook),
-- its id is the envelope id. Workers claim due rows with a lease (locked_until),
-- so a worker killed mid-attempt delays that attempt by one lease, never loses it.
CREATE TABLE webhook_deliveries (
  id                 uuid PRIMARY KEY,
  team_id            uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  -- Deleting a webhook deletes its log and so cancels whatever was pending.
  webhook_id         uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
  event_id           uuid REFERENCES events (id) ON DELETE SET NULL,
  event              text NOT NULL,
  -- NULL for an event's delivery: its envelope is built from the event row when
  -- sent and shown, so 10 webhooks of one event keep one copy of the payload and
  -- the rows updated twice per attempt stay small. Set (as json, so the key order
  -- and so the signed bytes stay as built) only for deliveries without an event
  -- (simulate).
  payload            json,
  status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'success', 'failed')),
  attempts           integer NOT NULL DEFAULT 0,
  -- Attempts of the current sequence (a resend starts a new one); decides the retry delay.
  sequence_attempts  integer NOT NULL DEFAULT 0,
  max_attempts       integer NOT NULL DEFAULT 7,
  attempted_at       timestamptz[] NOT NULL DEFAULT '{}',
  -- One object per attempt: {at, response_code, duration_ms, error}.
  attempt_log        jsonb NOT NULL DEFAULT '[]',
  response_code      integer,
  response_body      text,
  last_error         text,
  next_attempt_at    timestamptz,
  locked_until       timestamptz,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  UNIQUE (event_id, webhook_id)
) WITH (fillfactor = 70); -- room on the page for HOT updates of the claim (locked_until is not indexed)
CREATE INDEX webhook_deliveries_webhook_idx ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';

-- Live worker processes and the graphile-worker ids they run. A job locked by a
-- worker killed with kill -9 would stay locked for graphile-worker's 4-hour job
-- expiry; a process whose heartbeat stops has its jobs unlocked after 30 s.
CREATE TABLE worker_processes (
  id            text PRIMARY KEY,
  worker_ids    text[] NOT NULL DEFAULT '{}',
  started_at    timestamptz NOT NULL DEFAULT now(),
  heartbeat_at  timestamptz NOT NULL DEFAULT now()
);
