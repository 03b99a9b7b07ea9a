// Textual forms of non-public and public addresses, shared by the SSRF tests of
// the address guard, the webhook API and the mail-account API. Each refused form
// hides a loopback, private, metadata or otherwise non-public address.

/** IP literals as a mail-account host or inside a URL's brackets (IPv6) or host (IPv4). */
export const REFUSED_LITERALS = [
  '127.0.0.1', '127.255.0.9', '10.0.0.1', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '224.0.0.1',
  '255.255.255.255', '240.0.0.1', '192.0.2.1', '198.18.0.1', '0.0.0.0',
  '::', '::1', '0:0:0:0:0:0:0:1', '0000:0000:0000:0000:0000:0000:0000:0001', 'fe80::1', 'fc00::1', 'fd12:3456::1', 'ff02::1',
  // IPv4-mapped: full, compressed hex, mixed dotted, upper case, zero-padded
  '0:0:0:0:0:ffff:7f00:1', '::ffff:7f00:1', '::ffff:127.0.0.1', '::FFFF:7F00:1', '::FFFF:127.0.0.1',
  '0000:0000:0000:0000:0000:ffff:7f00:0001', '0:0:0:0:0:ffff:127.0.0.1', '::ffff:a9fe:a9fe', '::ffff:10.0.0.1',
  // IPv4-compatible (deprecated) and IPv4-translated
  '::7f00:1', '::127.0.0.1', '::a9fe:a9fe', '::ffff:0:7f00:1',
  // NAT64 (well-known and local-use prefixes), 6to4, Teredo with an embedded private client (10.0.0.1, bits inverted)
  '64:ff9b::7f00:1', '64:ff9b::127.0.0.1', '64:ff9b::a00:1', '64:ff9b:1::a00:1', '2002:7f00:1::', '2002:c0a8:101::',
  '2001:0:4136:e378:8000:63bf:f5ff:fffe',
  // documentation, discard, site-local
  '2001:db8::1', '100::1', 'fec0::1',
];

/** Numeric IPv4 forms that URL parsers and getaddrinfo read as 127.0.0.1. */
export const REFUSED_NUMERIC = ['2130706433', '0x7f000001', '0177.0.0.1', '127.1', '0x7f.1', '017700000001'];

export const PUBLIC_LITERALS = ['93.184.215.14', '8.8.8.8', '2606:4700:4700::1111', '2606:4700:4700:0:0:0:0:1111', '2A00:1450:4001:82A::200E'];

/** `host` as it appears in a URL. */
export function urlHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}
