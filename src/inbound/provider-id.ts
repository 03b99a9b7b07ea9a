// The id a relay names in its 250 answer to DATA: what provider events (SES,
// SendGrid, Postmark, Mailgun) and bounce reports from the relay call the
// message. Each relay words it its own way; unknown wordings give null (the
// message is still matched by our Message-ID).
const PATTERNS: RegExp[] = [
  // Postfix, SendGrid, Postmark, Brevo: "250 2.0.0 Ok: queued as 4BQZ2x1x2Zz9sXk" (sometimes <...>).
  /\bqueued as <?([^\s<>]{4,200})>?/i,
  // Exim: "250 OK id=1rABCd-0001Xy-2Z".
  /\bid=([^\s;,]{4,200})/i,
  // Amazon SES: "250 Ok 0100018c2b9e5f6a-1c2d3e4f-...-000000".
  /^250[ -](?:\d\.\d\.\d\s+)?ok\s+([0-9a-f]{16}-[0-9a-f-]{8,}-\d{6})\b/i,
  // Exchange / Microsoft 365: "250 2.6.0 <id@host> [InternalId=...] Queued mail for delivery".
  /^250[ -]\d\.\d\.\d\s+<([^<>\s]{4,200})>/,
  // Gmail: "250 2.0.0 OK  1699999999 a1-20020a17090a...- gsmtp".
  /\bOK\s+\d+\s+([^\s]{4,200})\s+-\s+gsmtp/i,
  // Sendmail: "250 2.0.0 3AB1234567 Message accepted for delivery".
  /^250[ -]\d\.\d\.\d\s+([A-Za-z0-9]{8,40})\s+Message accepted/i,
];

export function providerMessageId(response: string | null | undefined): string | null {
  if (!response) return null;
  const line = response.trim();
  for (const p of PATTERNS) {
    const m = p.exec(line);
    if (m) return m[1]!;
  }
  return null;
}
