// Why a campaign decision sent nothing, in words (the API's `reason`): one
// wording for the campaign page's decisions and the contact timeline.

const REASONS: Record<string, string> = {
  paused: 'the campaign was stopped',
  unsubscribed: 'the contact is unsubscribed',
  bounced: 'the contact’s address bounced',
  complained: 'the contact complained (marked a message as spam)',
  suppressed: 'the address is on the suppression list',
  segment_mismatch: 'the contact is outside the campaign’s segment',
  cooldown: 'the contact got this campaign within the cooldown',
  daily_cap: 'the contact reached the campaign’s daily cap',
  no_mail_account: 'no active mail account',
  account_daily_limit: 'the mail accounts reached their daily limit for campaigns',
  no_template: 'no active template',
  verification_invalid: 'address verification: the address cannot receive mail',
  verification_risky: 'address verification: a disposable or role address, not accepted by the campaign',
  verification_unknown: 'address verification: DNS did not answer, not accepted by the campaign',
  verification_valid: 'address verification: valid addresses are not accepted by the campaign',
  verification_budget: 'address verification: the send’s verification budget was spent',
};

/** The reason in words; a reason this file does not know (added later) shows as its code. */
export function reasonInWords(reason: string | null | undefined): string | null {
  if (!reason) return null;
  return Object.hasOwn(REASONS, reason) ? REASONS[reason]! : reason;
}
