-- Time-ordered UUIDs (RFC 9562 version 7): index-friendly ids that sort by
-- creation time. PostgreSQL 18 has uuidv7(); this function serves older servers.
CREATE FUNCTION plover_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
    set_bit(
      set_bit(
        overlay(uuid_send(gen_random_uuid())
                placing substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
        52, 1),
      53, 1), 'hex')::uuid
$$;

CREATE TABLE teams (
  id          uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a key is stored. The prefix (first characters of the key)
-- is kept so people can tell their keys apart in lists.
CREATE TABLE api_keys (
  id            uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id       uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  prefix        text NOT NULL,
  key_hash      bytea NOT NULL UNIQUE,
  created_at    timestamptz NOT NULL DEFAULT now(),
  last_used_at  timestamptz,
  revoked_at    timestamptz
);
CREATE INDEX api_keys_team_idx ON api_keys (team_id, created_at DESC, id DESC);
