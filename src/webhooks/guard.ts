// Webhook target rules (SSRF): what is webhook-specific about a target URL.
// The address rules themselves (public unicast only, the operator's
// ALLOWED_PRIVATE_TARGETS, the connect-time lookup) live in src/lib/net-guard.ts,
// shared with SMTP mail accounts. A URL is checked when a webhook is saved (a
// clear 422) and its addresses again at connect time (DNS rebinding). The WHATWG
// URL parser already turns numeric tricks (2130706433, 0x7f.1, 0177.0.0.1) into
// dotted IPv4 and IPv6 into its canonical form before the checks below.
import { ALLOW_SETTING, checkHost, isAllowedHost, systemResolver, type AllowList, type Resolver } from '../lib/net-guard.ts';

/** URL.hostname without IPv6 brackets and trailing dot, lower-cased. */
export function bareHost(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase();
}

/**
 * Checks a webhook URL at create/update time. Returns the problem as a message
 * for the 422 detail, or null when the URL is acceptable.
 */
export async function checkTargetUrl(raw: string, allow: AllowList, resolve: Resolver = systemResolver): Promise<string | null> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'must be an absolute URL';
  }
  const host = bareHost(url);
  const allowedByOperator = isAllowedHost(allow, host);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowedByOperator)) {
    return `must use https (plain http only for hosts allowed by ${ALLOW_SETTING})`;
  }
  if (url.username || url.password) return 'must not contain credentials';
  const check = await checkHost(host, allow, resolve);
  if (!check.ok) return check.problem;
  // A receiver must exist when it is saved; a mail host may be set up later (docs/decisions.md).
  if (!check.resolved) return `host "${host}" does not resolve`;
  return null;
}
