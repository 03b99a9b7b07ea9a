// Settings of mail that comes back through a relay (issue 14): provider event
// webhooks and IMAP polling. Parsed once with the rest of the configuration
// (config.ts); kept here beside the code they govern.

export type ProviderIntakeConfig = {
  /** Body limit of POST /inbound/<provider>/<token> (SendGrid batches many events in one body). */
  webhookBodyLimitBytes: number;
  /** A signed webhook (SendGrid, Mailgun) older than this, or this far in the future, is refused (replay window). */
  webhookMaxAgeS: number;
  /** Events taken from one webhook body; the rest are refused with 413 (a provider never sends that many). */
  webhookMaxEvents: number;
  /** How often each IMAP mailbox is polled. */
  imapPollIntervalS: number;
  /** Mailboxes polled by one run of the periodic job (the others wait for the next run). */
  imapAccountsPerRun: number;
  /** Messages read from one mailbox per poll (the rest wait for the next poll). */
  imapMessagesPerPoll: number;
  /** Larger messages are not downloaded: marked seen and logged. */
  imapMaxMessageBytes: number;
  /** Connection, greeting and socket timeouts of one IMAP session. */
  imapTimeoutMs: number;
};

type IntReader = (name: string, fallback: number, min: number, max: number) => number;

export function loadProviderIntakeConfig(int: IntReader): ProviderIntakeConfig {
  return {
    webhookBodyLimitBytes: int('PROVIDER_WEBHOOK_BODY_LIMIT_BYTES', 2 * 1024 * 1024, 1024, 64 * 1024 * 1024),
    webhookMaxAgeS: int('PROVIDER_WEBHOOK_MAX_AGE_S', 86_400, 60, 30 * 86_400),
    webhookMaxEvents: int('PROVIDER_WEBHOOK_MAX_EVENTS', 5_000, 1, 100_000),
    imapPollIntervalS: int('IMAP_POLL_INTERVAL_S', 120, 10, 86_400),
    imapAccountsPerRun: int('IMAP_ACCOUNTS_PER_RUN', 20, 1, 10_000),
    imapMessagesPerPoll: int('IMAP_MESSAGES_PER_POLL', 200, 1, 10_000),
    imapMaxMessageBytes: int('IMAP_MAX_MESSAGE_BYTES', 10 * 1024 * 1024, 1024, 100 * 1024 * 1024),
    imapTimeoutMs: int('IMAP_TIMEOUT_MS', 30_000, 1_000, 600_000),
  };
}
