// Webhook target safety (SSRF). A target must be https and its host must resolve
// only to public unicast addresses. Checked when a webhook is saved (a clear 422)
// and again for the address actually connected to, through the connection's DNS
// lookup, so a name that later re-resolves to 127.0.0.1 or 169.254.169.254 (DNS
// rebinding) is refused at connect time. The WHATWG URL parser already turns
// numeric tricks (2130706433, 0x7f.1, 0177.0.0.1) into dotted IPv4, so every
// check below sees canonical addresses.
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP } from 'node:net';

// Special-purpose ranges (IANA registries) that are never a public receiver.
const BLOCKED_V4 = [
  '0.0.0.0/8', // "this network", unspecified
  '10.0.0.0/8', // private
  '100.64.0.0/10', // CGNAT
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local, cloud metadata (169.254.169.254)
  '172.16.0.0/12', // private
  '192.0.0.0/24', // IETF protocol assignments
  '192.0.2.0/24', // TEST-NET-1
  '192.88.99.0/24', // 6to4 relay anycast
  '192.168.0.0/16', // private
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24', // TEST-NET-2
  '203.0.113.0/24', // TEST-NET-3
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, broadcast
];
const BLOCKED_V6 = [
  '::/128', // unspecified
  '::1/128', // loopback
  '64:ff9b::/96', // NAT64: reaches arbitrary IPv4, including private ranges
  '64:ff9b:1::/48', // local-use NAT64
  '100::/64', // discard
  '2001::/23', // IETF protocol assignments (Teredo included)
  '2001:db8::/32', // documentation
  '2002::/16', // 6to4: embeds arbitrary IPv4
  'fc00::/7', // unique local (ULA)
  'fe80::/10', // link-local
  'fec0::/10', // site-local (deprecated)
  'ff00::/8', // multicast
];

// One list per family: a BlockList matches IPv4 addresses against IPv6 rules
// in their IPv4-mapped form, which would blur the two.
const blockedV4 = new BlockList();
const blockedV6 = new BlockList();
for (const cidr of BLOCKED_V4) blockedV4.addSubnet(cidr.split('/')[0]!, Number(cidr.split('/')[1]), 'ipv4');
for (const cidr of BLOCKED_V6) blockedV6.addSubnet(cidr.split('/')[0]!, Number(cidr.split('/')[1]), 'ipv6');

/** An IPv4 address carried inside an IPv6 one (::ffff:a.b.c.d, ::a.b.c.d), if any. */
function embeddedV4(address: string): string | null {
  const lower = address.toLowerCase();
  const dotted = /^::(?:ffff:)?(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
  if (dotted) return dotted[1]!;
  const hex = /^::(?:ffff:)?([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (hex) {
    const hi = parseInt(hex[1]!, 16);
    const lo = parseInt(hex[2]!, 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return null;
}

/** True when `address` (an IP literal) is a public unicast address. */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return !blockedV4.check(address, 'ipv4');
  if (family === 6) {
    // IPv4-mapped and -compatible forms (::ffff:7f00:1) are refused outright: a
    // public receiver has no reason to be written that way, and they are the
    // classic way around IPv4 checks.
    if (embeddedV4(address) !== null) return false;
    return !blockedV6.check(address, 'ipv6');
  }
  return false;
}

export type AllowList = { hosts: Set<string>; ranges: BlockList; empty: boolean };

/** Parses WEBHOOK_ALLOWED_TARGETS entries: host names, IPs and CIDRs. Throws on a bad entry. */
export function parseAllowList(entries: string[]): AllowList {
  const hosts = new Set<string>();
  const ranges = new BlockList();
  for (const raw of entries) {
    const entry = raw.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1');
    const [addr, bits] = entry.split('/');
    const family = isIP(addr ?? '');
    if (family !== 0) {
      const type = family === 4 ? 'ipv4' : 'ipv6';
      if (bits === undefined) ranges.addAddress(addr!, type);
      else {
        const prefix = Number(bits);
        if (!/^\d+$/.test(bits) || prefix > (family === 4 ? 32 : 128)) throw new Error(`bad CIDR "${raw}"`);
        ranges.addSubnet(addr!, prefix, type);
      }
    } else if (/^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/.test(entry)) {
      hosts.add(entry.replace(/\.$/, ''));
    } else {
      throw new Error(`"${raw}" is not a host name, IP address or CIDR range`);
    }
  }
  return { hosts, ranges, empty: entries.length === 0 };
}

function allowedAddress(allow: AllowList, address: string): boolean {
  const family = isIP(address);
  return family !== 0 && allow.ranges.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

/** URL.hostname without IPv6 brackets and trailing dot, lower-cased. */
export function bareHost(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase();
}

/** Whether the operator allowed this host, by name or by address. */
export function isAllowedHost(allow: AllowList, host: string): boolean {
  return allow.hosts.has(host) || allowedAddress(allow, host);
}

/** Why `address`, reached for `host`, may not be connected to; null when it may. */
export function refusalFor(allow: AllowList, host: string, address: string): string | null {
  if (allow.hosts.has(host) || allowedAddress(allow, address)) return null;
  if (!isPublicAddress(address)) return `${address} is not a public address`;
  return null;
}

export type Resolver = (host: string) => Promise<string[]>;

const systemResolver: Resolver = (host) =>
  new Promise((resolve, reject) => {
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses: LookupAddress[]) =>
      err ? reject(err) : resolve(addresses.map((a) => a.address)),
    );
  });

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
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowedByOperator)) return 'must use https';
  if (url.username || url.password) return 'must not contain credentials';
  if (host === '') return 'must have a host';
  if (isIP(host)) {
    return refusalFor(allow, host, host) ? `must point to a public address (${host} is not one)` : null;
  }
  if (allowedByOperator) return null;
  if (host === 'localhost' || host.endsWith('.localhost') || !host.includes('.')) {
    return 'must use a public host name';
  }
  let addresses: string[];
  try {
    addresses = await withTimeout(resolve(host), 5_000);
  } catch {
    return `host "${host}" does not resolve`;
  }
  if (addresses.length === 0) return `host "${host}" does not resolve`;
  for (const address of addresses) {
    if (refusalFor(allow, host, address)) return `host "${host}" resolves to ${address}, which is not a public address`;
  }
  return null;
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timeout')), ms);
    p.then(
      (v) => (clearTimeout(timer), resolve(v)),
      (e) => (clearTimeout(timer), reject(e)),
    );
  });
}

export class TargetRefusedError extends Error {
  readonly code = 'ETARGETREFUSED';
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net/tls connect options: resolves like the system resolver and
 * refuses the connection when any resolved address is not public (unless
 * allowed). IP-literal hosts never reach a lookup; callers check those directly
 * with refusalFor before connecting.
 */
export function guardedLookup(allow: AllowList) {
  return (hostname: string, options: { all?: boolean; family?: number }, callback: LookupCallback): void => {
    const host = hostname.replace(/\.$/, '').toLowerCase();
    dnsLookup(hostname, { all: true, verbatim: true, family: options.family ?? 0 }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, []);
      for (const a of addresses) {
        const why = refusalFor(allow, host, a.address);
        if (why) return callback(new TargetRefusedError(`refused to connect to ${hostname}: ${why}`), []);
      }
      if (options.all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(Object.assign(new Error(`${hostname} did not resolve`), { code: 'ENOTFOUND' }), []);
      callback(null, first.address, first.family);
    });
  };
}
