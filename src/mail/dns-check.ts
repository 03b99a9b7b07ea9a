// "Check DNS" for a mail account's domain: the SPF record (TXT on the domain),
// each DKIM key's record (TXT at `<selector>._domainkey.<domain>`, its key
// compared with ours) and the DMARC record (TXT at `_dmarc.<domain>`, else at
// the organisational domain's, as receivers look it up, RFC 7489 6.6.3).
// The resolver is injectable: tests serve records from a stub, production asks
// the system's DNS servers with a short timeout.
import { Resolver } from 'node:dns/promises';
import { getDomain } from 'tldts';

/** TXT records at a name, each as its character-strings (node's resolveTxt shape). */
export type TxtResolver = (name: string) => Promise<string[][]>;

// Each lookup waits at most ~2 x 2.5 s; a check makes at most 3 + keys lookups, in parallel.
const LOOKUP_TIMEOUT_MS = 2_500;
let system: Resolver | undefined;
export const systemTxtResolver: TxtResolver = (name) => {
  system ??= new Resolver({ timeout: LOOKUP_TIMEOUT_MS, tries: 2 });
  return system.resolveTxt(name);
};

/** Records kept in a report (a domain can publish many TXT records); longer ones are cut. */
const MAX_RECORDS = 10;
const MAX_RECORD_CHARS = 2_000;

export type Lookup = { records: string[] } | { error: string };

// No such name, or a name without TXT records: nothing published.
const NOT_THERE = new Set(['ENOTFOUND', 'ENODATA']);

/** The TXT records at a name (strings of a record joined, RFC 7208 3.3), none when the name has none. */
async function txt(resolve: TxtResolver, name: string): Promise<Lookup> {
  try {
    const records = (await resolve(name)).map((chunks) => chunks.join(''));
    return { records };
  } catch (err) {
    const code = (err as { code?: string }).code ?? '';
    if (NOT_THERE.has(code)) return { records: [] };
    return { error: code === 'ETIMEOUT' ? 'the lookup timed out' : `the lookup failed (${code || 'error'})` };
  }
}

const shown = (records: string[]) => records.slice(0, MAX_RECORDS).map((r) => (r.length > MAX_RECORD_CHARS ? `${r.slice(0, MAX_RECORD_CHARS)}…` : r));

/** `k=v; k=v` tags of a DKIM or DMARC record, names lower-cased, values trimmed. */
export function parseTags(record: string): Map<string, string> {
  const tags = new Map<string, string>();
  for (const part of record.split(';')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    const name = part.slice(0, i).trim().toLowerCase();
    if (!tags.has(name)) tags.set(name, part.slice(i + 1).trim());
  }
  return tags;
}

export type DkimFinding = {
  status: 'found' | 'missing' | 'mismatch' | 'error';
  name: string;
  records: string[];
  message: string;
};

/** Is our key published at its selector? `mismatch`: a DKIM record is there, with another key (or algorithm). */
export async function lookupDkimRecord(
  key: { selector: string; domain: string; algorithm: string; public_key: string },
  resolve: TxtResolver,
): Promise<DkimFinding> {
  const name = `${key.selector}._domainkey.${key.domain}`;
  const got = await txt(resolve, name);
  if ('error' in got) return { status: 'error', name, records: [], message: `${name}: ${got.error}` };
  const dkim = got.records.filter((r) => {
    const v = parseTags(r).get('v');
    return (v === undefined || v === 'DKIM1') && parseTags(r).has('p');
  });
  if (dkim.length === 0) return { status: 'missing', name, records: shown(got.records), message: `no DKIM record at ${name}` };
  const ours = dkim.some((r) => {
    const tags = parseTags(r);
    // Long keys are published as several strings; spaces inside p= do not count (RFC 6376 3.6.1).
    return (tags.get('p') ?? '').replace(/\s+/g, '') === key.public_key && (tags.get('k') ?? 'rsa').toLowerCase() === key.algorithm;
  });
  return ours
    ? { status: 'found', name, records: shown(dkim), message: `the record at ${name} publishes this key` }
    : { status: 'mismatch', name, records: shown(dkim), message: `the record at ${name} publishes another key` };
}

export type PolicyFinding = {
  status: 'found' | 'missing' | 'invalid' | 'error';
  name: string;
  records: string[];
  message: string;
};

async function lookupSpf(domain: string, resolve: TxtResolver): Promise<PolicyFinding> {
  const got = await txt(resolve, domain);
  if ('error' in got) return { status: 'error', name: domain, records: [], message: `${domain}: ${got.error}` };
  const spf = got.records.filter((r) => /^v=spf1(\s|$)/i.test(r.trim()));
  if (spf.length === 0) return { status: 'missing', name: domain, records: [], message: `no SPF record (v=spf1) at ${domain}` };
  if (spf.length > 1) {
    return { status: 'invalid', name: domain, records: shown(spf), message: `${spf.length} SPF records at ${domain}: receivers treat that as an error (RFC 7208 4.5); merge them into one` };
  }
  return { status: 'found', name: domain, records: shown(spf), message: `SPF record found at ${domain}` };
}

export type DmarcFinding = PolicyFinding & { policy: string | null };

async function lookupDmarc(domain: string, resolve: TxtResolver): Promise<DmarcFinding> {
  const organisational = getDomain(domain, { allowPrivateDomains: true }) ?? domain;
  const names = organisational !== domain ? [`_dmarc.${domain}`, `_dmarc.${organisational}`] : [`_dmarc.${domain}`];
  for (const name of names) {
    const got = await txt(resolve, name);
    if ('error' in got) return { status: 'error', name, records: [], message: `${name}: ${got.error}`, policy: null };
    const dmarc = got.records.filter((r) => /^v\s*=\s*DMARC1\s*(;|$)/i.test(r.trim()));
    if (dmarc.length > 1) {
      return { status: 'invalid', name, records: shown(dmarc), message: `${dmarc.length} DMARC records at ${name}: receivers ignore them all (RFC 7489 6.6.3)`, policy: null };
    }
    if (dmarc.length === 1) {
      const policy = parseTags(dmarc[0]!).get('p')?.toLowerCase() ?? null;
      return { status: 'found', name, records: shown(dmarc), message: `DMARC record found at ${name}${policy ? ` (p=${policy})` : ''}`, policy };
    }
  }
  return { status: 'missing', name: names[0]!, records: [], message: `no DMARC record (v=DMARC1) at ${names.join(' or ')}`, policy: null };
}

export type DnsReport = {
  domain: string;
  checked_at: string;
  spf: PolicyFinding;
  dkim: (DkimFinding & { key_id: string; selector: string; algorithm: string; key_status: string })[];
  dmarc: DmarcFinding;
};

/** Every finding for a domain and these keys, looked up in parallel. */
export async function checkDomainDns(
  domain: string,
  keys: { id: string; selector: string; domain: string; algorithm: string; public_key: string; status: string }[],
  resolve: TxtResolver,
  now = new Date(),
): Promise<DnsReport> {
  const [spf, dmarc, ...dkim] = await Promise.all([
    lookupSpf(domain, resolve),
    lookupDmarc(domain, resolve),
    ...keys.map(async (k) => ({
      key_id: k.id, selector: k.selector, algorithm: k.algorithm, key_status: k.status, ...(await lookupDkimRecord(k, resolve)),
    })),
  ]);
  return { domain, checked_at: now.toISOString(), spf: spf as PolicyFinding, dmarc: dmarc as DmarcFinding, dkim: dkim as DnsReport['dkim'] };
}
