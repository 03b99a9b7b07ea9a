// Outbound address safety (SSRF), shared by webhooks and SMTP mail accounts.
// Only public unicast addresses may be reached, unless the operator lists a
// host, address or range in ALLOWED_PRIVATE_TARGETS. Every address is parsed
// and normalised with ipaddr.js before it is classified, so no textual form
// (0:0:0:0:0:ffff:7f00:1, ::FFFF:127.0.0.1, 0177.0.0.1, ...) slips past a
// pattern: what is matched is the 16 or 4 bytes, not the spelling.
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import ipaddr from 'ipaddr.js';

/** The setting every refusal names, so a developer knows how to allow a target. */
export const ALLOW_SETTING = 'ALLOWED_PRIVATE_TARGETS';

/** What a local trial (a loopback PUBLIC_URL) allows when the setting is unset. */
export const LOOPBACK_TARGETS = ['127.0.0.0/8', '::1', 'localhost'];

/** Ports a public SMTP host may use; an allowed private host may use any. */
export const SMTP_PUBLIC_PORTS = [25, 465, 587, 2525];

type Address = ipaddr.IPv4 | ipaddr.IPv6;
type Range = [Address, number];

const cidr = (text: string): Range => ipaddr.parseCIDR(text);

// ipaddr.js's range() already names loopback, private, link-local, CGNAT,
// multicast, reserved (TEST-NETs, 240/4), NAT64 (rfc6052), 6to4, Teredo,
// ULA, discard, documentation and the other IANA special-purpose blocks; only
// `unicast` passes. These add what its table lacks.
const EXTRA_BLOCKED: Range[] = [
  cidr('::/96'), // IPv4-compatible (::7f00:1, deprecated by RFC 4291): would reach the embedded IPv4
  cidr('2001::/23'), // IETF protocol assignments, wider than Teredo's /32
  cidr('2001:db8::/32'), // documentation
];

/**
 * Parses an IP literal in any form ipaddr.js reads (IPv6 full, compressed,
 * mixed dotted, upper case, zero-padded, with a zone; IPv4 dotted, decimal,
 * octal or hex) and folds IPv4-mapped IPv6 into IPv4, so ::ffff:7f00:1 and
 * 127.0.0.1 are one address. Null when `text` is not an IP literal.
 */
export function parseAddress(text: string): Address | null {
  let bare = text.trim().replace(/^\[(.*)\]$/, '$1');
  // ipaddr.js 2.5 reads an IPv4-compatible address with a dotted tail
  // (::127.0.0.1, which is ::7f00:1) as IPv4-mapped, so ::93.184.215.14 and
  // ::5db8:d70e would be classified differently. The WHATWG URL parser writes
  // IPv6 in its canonical hex form first; a zone id (fe80::1%eth0) it does not
  // take is left to ipaddr.js.
  if (bare.includes(':') && bare.includes('.')) {
    try {
      bare = new URL(`http://[${bare}]/`).hostname.slice(1, -1);
    } catch {
      return null;
    }
  }
  if (!ipaddr.isValid(bare)) return null;
  try {
    return ipaddr.process(bare);
  } catch {
    return null;
  }
}

function isPublic(addr: Address): boolean {
  if (addr.range() !== 'unicast') return false;
  return !EXTRA_BLOCKED.some(([net, bits]) => addr.kind() === net.kind() && addr.match(net, bits));
}

/** True when `address` (an IP literal, any textual form) is a public unicast address. */
export function isPublicAddress(address: string): boolean {
  const addr = parseAddress(address);
  return addr !== null && isPublic(addr);
}

export type AllowList = { hosts: Set<string>; ranges: Range[]; entries: string[] };

const HOST_NAME = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/;

/** Parses ALLOWED_PRIVATE_TARGETS entries: host names, IPs and CIDRs. Throws on a bad entry. */
export function parseAllowList(entries: string[]): AllowList {
  const hosts = new Set<string>();
  const ranges: Range[] = [];
  for (const raw of entries) {
    const entry = raw.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1');
    const slash = entry.indexOf('/');
    if (slash >= 0 && parseAddress(entry.slice(0, slash))) {
      const addr = parseAddress(entry.slice(0, slash));
      const bits = entry.slice(slash + 1);
      const v6Text = entry.includes(':');
      if (!addr || !/^\d{1,3}$/.test(bits) || Number(bits) > (v6Text ? 128 : 32)) throw new Error(`bad CIDR "${raw}"`);
      // A mapped range (::ffff:10.0.0.0/104) is the IPv4 range it maps, as addresses are.
      const mapped = addr.kind() === 'ipv4' && v6Text;
      if (mapped && Number(bits) < 96) throw new Error(`bad CIDR "${raw}" (an IPv4-mapped range needs a prefix of at least 96)`);
      ranges.push([addr, mapped ? Number(bits) - 96 : Number(bits)]);
      continue;
    }
    const addr = parseAddress(entry);
    if (addr) ranges.push([addr, addr.kind() === 'ipv4' ? 32 : 128]);
    else if (HOST_NAME.test(entry)) hosts.add(entry.replace(/\.$/, ''));
    else throw new Error(`"${raw}" is not a host name, IP address or CIDR range`);
  }
  return { hosts, ranges, entries };
}

function inAllowedRange(allow: AllowList, address: string): boolean {
  const addr = parseAddress(address);
  return addr !== null && allow.ranges.some(([net, bits]) => addr.kind() === net.kind() && addr.match(net, bits));
}

/** Lower-cased, without IPv6 brackets and trailing dot. */
export function normalizeHost(host: string): string {
  return host.trim().replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase();
}

/** Whether the operator allowed this host, by name or (for an IP literal) by address. */
export function isAllowedHost(allow: AllowList, host: string): boolean {
  const h = normalizeHost(host);
  return allow.hosts.has(h) || inAllowedRange(allow, h);
}

/** Why `address`, reached for `host`, may not be connected to; null when it may. */
export function refusalFor(allow: AllowList, host: string, address: string): string | null {
  if (allow.hosts.has(normalizeHost(host)) || inAllowedRange(allow, address)) return null;
  if (!isPublicAddress(address)) return `${address} is not a public address; list it in ${ALLOW_SETTING} to allow it`;
  return null;
}

/** Whether every address of `host` is one the operator allowed (so any port may be used). */
function allowedPrivately(allow: AllowList, host: string, addresses: string[]): boolean {
  return allow.hosts.has(normalizeHost(host)) || (addresses.length > 0 && addresses.every((a) => inAllowedRange(allow, a)));
}

/** Why an SMTP connection to `host`:`port` resolved to `addresses` is refused by the port rule; null when fine. */
export function smtpPortRefusal(allow: AllowList, host: string, port: number, addresses: string[]): string | null {
  if (SMTP_PUBLIC_PORTS.includes(port) || allowedPrivately(allow, host, addresses)) return null;
  return `port ${port} is not an SMTP port (${SMTP_PUBLIC_PORTS.join(', ')}); other ports only for hosts allowed by ${ALLOW_SETTING}`;
}

export type Resolver = (host: string) => Promise<string[]>;

export const systemResolver: Resolver = (host) =>
  new Promise((resolve, reject) => {
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses: LookupAddress[]) =>
      err ? reject(err) : resolve(addresses.map((a) => a.address)),
    );
  });

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timeout')), ms);
    p.then(
      (v) => (clearTimeout(timer), resolve(v)),
      (e) => (clearTimeout(timer), reject(e)),
    );
  });
}

export type HostCheck =
  | { ok: false; problem: string }
  /** `addresses` is empty for an IP literal's own check, for an allowed name and for a name that did not resolve. */
  | { ok: true; addresses: string[]; resolved: boolean };

/**
 * Checks a target host (a name or an IP literal in any form) before it is
 * saved: an IP literal must be public or allowed; a name must not be a local
 * one (localhost, *.localhost, a single label) unless allowed, and every
 * address it resolves to must be public or allowed. A name that does not
 * resolve is `resolved: false`; the caller decides whether that is a problem.
 */
export async function checkHost(host: string, allow: AllowList, resolve: Resolver = systemResolver): Promise<HostCheck> {
  const h = normalizeHost(host);
  if (h === '') return { ok: false, problem: 'must have a host' };
  const literal = parseAddress(h);
  if (literal) {
    const why = refusalFor(allow, h, h);
    return why ? { ok: false, problem: `must be a public address: ${why}` } : { ok: true, addresses: [literal.toString()], resolved: true };
  }
  if (allow.hosts.has(h)) return { ok: true, addresses: [], resolved: true };
  if (h === 'localhost' || h.endsWith('.localhost') || !h.includes('.')) {
    return { ok: false, problem: `must be a public host name; list "${h}" in ${ALLOW_SETTING} to allow it` };
  }
  let addresses: string[];
  try {
    addresses = await withTimeout(resolve(h), 5_000);
  } catch {
    return { ok: true, addresses: [], resolved: false };
  }
  if (addresses.length === 0) return { ok: true, addresses: [], resolved: false };
  for (const address of addresses) {
    const why = refusalFor(allow, h, address);
    if (why) return { ok: false, problem: `host "${h}" resolves to ${why}` };
  }
  return { ok: true, addresses, resolved: true };
}

export class TargetRefusedError extends Error {
  readonly code = 'ETARGETREFUSED';
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net/tls/undici connect options: resolves like the system
 * resolver and refuses the connection when any resolved address is not public
 * (unless allowed), or when `extra` objects to the addresses. The socket then
 * connects to an address this function has checked, so a name that re-resolves
 * to 127.0.0.1 after it was saved (DNS rebinding) is refused here. IP-literal
 * hosts never reach a lookup; callers check those with refusalFor first.
 */
export function guardedLookup(allow: AllowList, extra?: (host: string, addresses: string[]) => string | null) {
  return (hostname: string, options: { all?: boolean; family?: number }, callback: LookupCallback): void => {
    dnsLookup(hostname, { all: true, verbatim: true, family: options.family ?? 0 }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, []);
      for (const a of addresses) {
        const why = refusalFor(allow, hostname, a.address);
        if (why) return callback(new TargetRefusedError(`refused to connect to ${hostname}: ${why}`), []);
      }
      const objection = extra?.(hostname, addresses.map((a) => a.address));
      if (objection) return callback(new TargetRefusedError(`refused to connect to ${hostname}: ${objection}`), []);
      if (options.all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(Object.assign(new Error(`${hostname} did not resolve`), { code: 'ENOTFOUND' }), []);
      callback(null, first.address, first.family);
    });
  };
}

/** One line for the start banner: which private targets are allowed and why. */
export function describeAllowList(entries: string[], source: string): string {
  return entries.length === 0
    ? `${ALLOW_SETTING}: none (only public addresses; ${source})`
    : `${ALLOW_SETTING}: ${entries.join(', ')} (${source})`;
}
