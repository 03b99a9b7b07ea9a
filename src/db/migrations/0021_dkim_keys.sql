-- DKIM keys per mail account (issue 14). A key is `pending` from its creation
-- until the team has published its DNS record and activates it; then `active`
-- (it signs every message of the account); an active key that a newer one of
-- the same algorithm replaces becomes `retired` (it signs no more; its DNS
-- record may stay for a while so mail in flight still verifies). At most one
-- active key per account and algorithm: an account with an active RSA and an
-- active Ed25519 key signs each message twice (RFC 8463).
CREATE TABLE dkim_keys (
  id              uuid PRIMARY KEY DEFAULT plover_uuid_v7(),
  team_id         uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  mail_account_id uuid NOT NULL REFERENCES mail_accounts (id) ON DELETE CASCADE,
  algorithm       text NOT NULL CHECK (algorithm IN ('rsa', 'ed25519')),
  -- The d= domain (the account's From domain when the key was made) and s= selector.
  domain          text NOT NULL,
  selector        text NOT NULL,
  -- The p= value of the DNS record: base64 of the SubjectPublicKeyInfo (RSA)
  -- or of the raw 32-byte key (Ed25519, RFC 8463).
  public_key      text NOT NULL,
  -- The private key (PKCS#8 PEM), sealed with the installation's secret.
  private_key_enc bytea NOT NULL,
  status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'active', 'retired')),
  created_at      timestamptz NOT NULL DEFAULT now(),
  activated_at    timestamptz,
  retired_at      timestamptz
);
-- One DNS name, one key: a selector is unique per domain within a team.
CREATE UNIQUE INDEX dkim_keys_selector_idx ON dkim_keys (team_id, domain, selector);
CREATE UNIQUE INDEX dkim_keys_active_idx ON dkim_keys (mail_account_id, algorithm) WHERE status = 'active';
CREATE INDEX dkim_keys_account_idx ON dkim_keys (mail_account_id, created_at DESC, id DESC);
