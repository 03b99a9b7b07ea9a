-- Address verification before campaign sends (campaign send_data
-- verification_data). One verdict per mail domain, shared by every team (DNS
-- answers are public facts), kept for a while: answers 24 hours, `unknown`
-- (a DNS failure) 1 hour. A contact keeps its last result; a send counts the
-- verifications it made against its budget.
CREATE TABLE mail_domain_checks (
  domain      text PRIMARY KEY,
  status      text NOT NULL CHECK (status IN ('valid', 'invalid', 'unknown')),
  reason      text NOT NULL,
  checked_at  timestamptz NOT NULL
);
ALTER TABLE contacts ADD COLUMN validation_status text CHECK (validation_status IN ('valid', 'risky', 'invalid', 'unknown'));
ALTER TABLE campaign_sends ADD COLUMN verifications_used integer NOT NULL DEFAULT 0;
