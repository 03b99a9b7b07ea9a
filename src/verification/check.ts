// Address verification (campaign send_data verification_data): syntax, the
// domain's mail hosts in DNS, a disposable-domain list and role addresses. No
// SMTP probing of recipients' servers. Statuses:
//   valid    the domain takes mail (MX, or A/AAAA when it has no MX)
//   risky    it takes mail, but the address is disposable or a role address
//   invalid  bad syntax, the domain does not exist (NXDOMAIN), refuses mail
//            (a null MX, RFC 7505) or has no MX, A nor AAAA record
//   unknown  DNS did not answer (SERVFAIL, timeout, refused): not a verdict
import { Resolver } from 'node:dns/promises';
import { createRequire } from 'node:module';
import type MailCheckerModule from 'mailchecker';

export type VerificationStatus = 'valid' | 'risky' | 'invalid' | 'unknown';
export type Verdict = { status: VerificationStatus; reason: string };
/** A domain's verdict: only DNS decides it, so `risky` is never one. */
export type DomainVerdict = { status: 'valid' | 'invalid' | 'unknown'; reason: string };

/** What verification asks of DNS; node:dns/promises' Resolver fits, and tests pass one pointed at a stub server. */
export type MailDnsResolver = {
  resolveMx(domain: string): Promise<{ exchange: string; priority: number }[]>;
  resolve4(domain: string): Promise<string[]>;
  resolve6(domain: string): Promise<string[]>;
};

/** The production resolver: the system's servers unless `servers` (host or host:port) are given, each lookup bounded. */
export function mailDnsResolver(opts: { servers?: string[]; timeoutMs?: number; tries?: number } = {}): MailDnsResolver {
  const r = new Resolver({ timeout: opts.timeoutMs ?? 3000, tries: opts.tries ?? 2 });
  if (opts.servers && opts.servers.length > 0) r.setServers(opts.servers);
  return r;
}

let fallback: MailDnsResolver | undefined;
/**
 * The resolver of the send path: VERIFY_DNS_SERVERS (comma-separated host or
 * host:port; default the system's) and VERIFY_DNS_TIMEOUT_MS (default 3000)
 * per try, 2 tries.
 */
export function defaultMailDns(env: NodeJS.ProcessEnv = process.env): MailDnsResolver {
  if (fallback) return fallback;
  const servers = (env.VERIFY_DNS_SERVERS ?? '').split(',').map((x) => x.trim()).filter(Boolean);
  const timeout = Number(env.VERIFY_DNS_TIMEOUT_MS ?? 3000);
  fallback = mailDnsResolver({ servers, timeoutMs: Number.isFinite(timeout) && timeout > 0 ? Math.min(timeout, 30_000) : 3000 });
  return fallback;
}

/** Local parts that name a function, not a person: mail to them is read by many or by none. */
export const ROLE_LOCAL_PARTS = new Set([
  'abuse', 'admin', 'administrator', 'billing', 'compliance', 'contact', 'devnull', 'dns', 'ftp', 'help', 'hostmaster',
  'info', 'it', 'list', 'list-request', 'mail', 'mailer-daemon', 'marketing', 'media', 'news', 'no-reply', 'noc',
  'noreply', 'null', 'office', 'postmaster', 'privacy', 'root', 'sales', 'security', 'spam', 'support', 'sysadmin',
  'team', 'undisclosed-recipients', 'unsubscribe', 'usenet', 'uucp', 'webmaster', 'www',
]);

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const LOCAL = /^[a-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$/;

/** Syntax of an address as we send to it (dot-atom local part, a host name with a dot): a reason, or null when it is fine. */
export function syntaxProblem(address: string): string | null {
  if (address.length > 254) return 'longer than 254 characters';
  const at = address.lastIndexOf('@');
  if (at <= 0 || at === address.length - 1) return 'not of the form local@domain';
  const local = address.slice(0, at);
  const domain = address.slice(at + 1).toLowerCase();
  if (!LOCAL.test(local.toLowerCase()) || local.startsWith('.') || local.endsWith('.') || local.includes('..')) return 'the local part is not valid';
  const labels = domain.split('.');
  if (labels.length < 2 || !labels.every((l) => LABEL.test(l)) || /^[0-9]+$/.test(labels.at(-1)!)) return 'the domain is not a valid host name';
  return null;
}

// mailchecker's list is one 1 MB source file that stays in the heap once
// loaded: it is required at the first check, not by every process that
// imports this module.
const require = createRequire(import.meta.url);
let disposable: Set<string> | undefined;
const disposableDomains = () => (disposable ??= (require('mailchecker') as typeof MailCheckerModule).blacklist());

/** Whether the domain, or a domain it is under, is on the maintained disposable-domain list (mailchecker). */
export function isDisposable(domain: string): boolean {
  const list = disposableDomains();
  for (let d = domain; d.includes('.'); d = d.slice(d.indexOf('.') + 1)) if (list.has(d)) return true;
  return false;
}

const code = (err: unknown) => (err as { code?: string } | null)?.code ?? '';
const NO_SUCH_DOMAIN = new Set(['ENOTFOUND']);
const NO_RECORDS = new Set(['ENODATA']);

/** The domain's verdict from DNS: MX (a null MX refuses mail), else A or AAAA. */
export async function checkDomain(resolver: MailDnsResolver, domain: string): Promise<DomainVerdict> {
  try {
    const mx = await resolver.resolveMx(domain);
    if (mx.length === 1 && (mx[0]!.exchange === '' || mx[0]!.exchange === '.')) return { status: 'invalid', reason: 'the domain refuses mail (null MX)' };
    if (mx.length > 0) return { status: 'valid', reason: 'MX record' };
  } catch (err) {
    if (NO_SUCH_DOMAIN.has(code(err))) return { status: 'invalid', reason: 'the domain does not exist' };
    if (!NO_RECORDS.has(code(err))) return { status: 'unknown', reason: `DNS did not answer (${code(err) || 'error'})` };
  }
  // No MX: mail goes to the domain's own address (RFC 5321 5.1).
  for (const [lookup, name] of [[(d: string) => resolver.resolve4(d), 'A'], [(d: string) => resolver.resolve6(d), 'AAAA']] as const) {
    try {
      if ((await lookup(domain)).length > 0) return { status: 'valid', reason: `no MX; ${name} record` };
    } catch (err) {
      if (NO_SUCH_DOMAIN.has(code(err))) return { status: 'invalid', reason: 'the domain does not exist' };
      if (!NO_RECORDS.has(code(err))) return { status: 'unknown', reason: `DNS did not answer (${code(err) || 'error'})` };
    }
  }
  return { status: 'invalid', reason: 'no MX, A or AAAA record' };
}

/** An address's verdict given its domain's. */
export function verdictFor(address: string, domain: DomainVerdict | undefined): Verdict {
  const problem = syntaxProblem(address);
  if (problem) return { status: 'invalid', reason: `syntax: ${problem}` };
  if (!domain) return { status: 'unknown', reason: 'the domain was not checked' };
  if (domain.status !== 'valid') return domain;
  const [local, host] = address.toLowerCase().split(/@(?=[^@]*$)/) as [string, string];
  if (isDisposable(host)) return { status: 'risky', reason: 'disposable address domain' };
  if (ROLE_LOCAL_PARTS.has(local.split('+')[0]!)) return { status: 'risky', reason: 'role address' };
  return domain;
}
