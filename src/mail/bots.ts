// Bot detection for opens and clicks: a pure function from the signals of one
// hit to a decision {is_bot, bot_score, reasons}. No I/O here: the caller
// gathers the signals (previous hits of the same send, time since sending) in
// the hit's transaction. Signals, weights and thresholds: docs/bot-detection.md.
import { BlockList, isIPv4 } from 'node:net';
import { isbot } from 'isbot';

export type HitKind = 'open' | 'click' | 'honeypot';

export type BotReason =
  | 'honeypot'
  | 'honeypot_followed'
  | 'security_scanner'
  | 'scanner_network'
  | 'apple_privacy_proxy'
  | 'bot_user_agent'
  | 'missing_user_agent'
  | 'head_request'
  | 'immediate_after_send'
  | 'soon_after_send'
  | 'rapid_multi_click';

export type BotSignals = {
  kind: HitKind;
  method: string;
  userAgent: string | null;
  ip: string | null;
  /** Seconds between the send's sent_at and this hit; null when unknown. */
  secondsSinceSent: number | null;
  /** A honeypot hit on this send within HONEYPOT_WINDOW_SECONDS, or from this IP within HONEYPOT_SAME_IP_SECONDS. */
  honeypotFollowed: boolean;
  /** Distinct other URLs of this send clicked within RAPID_CLICK_WINDOW_MS before this click. */
  otherLinksClickedRecently: number;
};

export type BotDecision = { is_bot: boolean; bot_score: number; reasons: BotReason[] };

/** Mail privacy proxies that fetch images on the reader's behalf. */
export type MailProxy = 'apple' | 'google' | 'yahoo';

export type HitClassification = {
  decision: BotDecision;
  /** The recognised scanner or proxy (e.g. `barracuda`, `google`), for the hit log. */
  fingerprint: string | null;
  proxy: MailProxy | null;
};

// One threshold on a combined score. Every strong signal alone crosses it; the
// weak ones (scanner_network, soon_after_send) only together with another.
export const BOT_THRESHOLD = 0.5;

export const WEIGHTS: Record<BotReason, number> = {
  honeypot: 1,
  honeypot_followed: 0.95,
  security_scanner: 0.95,
  bot_user_agent: 0.9,
  apple_privacy_proxy: 0.9,
  head_request: 0.8,
  immediate_after_send: 0.8,
  missing_user_agent: 0.6,
  rapid_multi_click: 0.6, // one other link; 0.95 from two others (RAPID_MANY_WEIGHT)
  scanner_network: 0.45,
  soon_after_send: 0.3,
};
const RAPID_MANY_WEIGHT = 0.95;

// sent_at is when our relay accepted the message; the mailbox gets it later
// still, so nobody reads it within 5 s nor opens it and clicks within 10 s.
// Gateways scan on arrival, typically within these windows.
export const IMMEDIATE_OPEN_SECONDS = 5;
export const IMMEDIATE_CLICK_SECONDS = 10;
export const SOON_SECONDS = 60;
// A person cannot click two different links of one message within 2 s: each
// click leaves the mail client for a browser. Scanners fetch every link at once.
export const RAPID_CLICK_WINDOW_MS = 2_000;
// Scanners that follow the honeypot fetch the real links in the same pass.
export const HONEYPOT_WINDOW_SECONDS = 120;
// Some come back later (re-scans, detonation at click time) from the same
// address. Bounded because an on-premises gateway can share its NAT address
// with the recipient, whose own clicks must not stay bots for ever.
export const HONEYPOT_SAME_IP_SECONDS = 24 * 3600;

type Fingerprint = { name: string; ua: RegExp };

// User agents of security gateways and link-protection services that fetch
// links and images before (or instead of) the recipient. isbot knows many of
// them too; naming them here gives the reason `security_scanner` and the
// vendor in the hit log.
export const SCANNER_USER_AGENTS: Fingerprint[] = [
  { name: 'microsoft_defender', ua: /SafeLinks|Microsoft Defender|BingPreview|Microsoft Office Existence Discovery|\bms-office\b|MSOffice/i },
  { name: 'proofpoint', ua: /Proofpoint|pphosted/i },
  { name: 'mimecast', ua: /Mimecast/i },
  { name: 'barracuda', ua: /Barracuda/i },
  { name: 'cisco_ironport', ua: /IronPort|Cisco Secure Email|CiscoESA/i },
  { name: 'symantec', ua: /Symantec|MessageLabs/i },
  { name: 'trend_micro', ua: /Trend ?Micro/i },
  { name: 'sophos', ua: /Sophos/i },
  { name: 'forcepoint', ua: /Forcepoint|Websense/i },
  { name: 'fortinet', ua: /Forti(Guard|net|Mail)/i },
  { name: 'zscaler', ua: /Zscaler/i },
  { name: 'trellix', ua: /FireEye|Trellix/i },
  { name: 'check_point', ua: /Check ?Point|Avanan/i },
  { name: 'other_gateway', ua: /Hornetsecurity|Vade ?Secure|Libraesva|SpamTitan|Trustwave|Cloudmark|Abnormal ?Security|IRONSCALES|Darktrace/i },
];

// Published mail-gateway egress ranges. These machines relay and scan mail; a
// person does not browse from them. Weak on its own (scanner_network) because
// vendors move ranges and this list ages: see docs/bot-detection.md.
export const SCANNER_NETWORKS: { name: string; cidrs: string[] }[] = [
  { name: 'microsoft_defender', cidrs: ['40.92.0.0/15', '40.107.0.0/16', '52.100.0.0/14', '104.47.0.0/17'] },
  { name: 'proofpoint', cidrs: ['148.163.128.0/19', '67.231.144.0/20'] },
  { name: 'mimecast', cidrs: ['205.139.110.0/24', '207.211.30.0/24'] },
  { name: 'barracuda', cidrs: ['64.235.144.0/20', '209.222.80.0/21'] },
  { name: 'cisco_ironport', cidrs: ['68.232.128.0/19'] },
];
// Apple's own network; Mail Privacy Protection fetches from it (and from relay
// partners' ranges, which iCloud Private Relay users browse from too).
const APPLE_NETWORK = '17.0.0.0/8';

function blockList(cidrs: string[]): BlockList {
  const list = new BlockList();
  for (const cidr of cidrs) {
    const [net, bits] = cidr.split('/');
    list.addSubnet(net!, Number(bits), 'ipv4');
  }
  return list;
}
const scannerNetworks = SCANNER_NETWORKS.map((n) => ({ name: n.name, list: blockList(n.cidrs) }));
const appleNetwork = blockList([APPLE_NETWORK]);

/** IPv4 (also IPv4-mapped IPv6) or null. */
function ipv4(ip: string | null): string | null {
  if (!ip) return null;
  const v = ip.startsWith('::ffff:') ? ip.slice(7) : ip;
  return isIPv4(v) ? v : null;
}

export function scannerByUserAgent(ua: string): string | null {
  return SCANNER_USER_AGENTS.find((f) => f.ua.test(ua))?.name ?? null;
}

export function scannerByNetwork(ip: string | null): string | null {
  const v4 = ipv4(ip);
  if (!v4) return null;
  return scannerNetworks.find((n) => n.list.check(v4, 'ipv4'))?.name ?? null;
}

/**
 * The mail privacy proxy that fetched an image, if any. Apple Mail Privacy
 * Protection fetches with the bare user agent `Mozilla/5.0` (or a UA without
 * platform details from Apple's network); Gmail and Yahoo name themselves.
 */
export function mailProxy(ua: string, ip: string | null): MailProxy | null {
  if (/GoogleImageProxy|ggpht\.com/i.test(ua)) return 'google';
  if (/YahooMailProxy/i.test(ua)) return 'yahoo';
  if (ua.trim() === 'Mozilla/5.0') return 'apple';
  const v4 = ipv4(ip);
  if (v4 && appleNetwork.check(v4, 'ipv4') && !ua.includes('(')) return 'apple';
  return null;
}

export function classifyHit(s: BotSignals): HitClassification {
  const fired = new Map<BotReason, number>();
  const add = (reason: BotReason, weight = WEIGHTS[reason]) => fired.set(reason, Math.max(fired.get(reason) ?? 0, weight));
  const ua = (s.userAgent ?? '').trim();
  let fingerprint: string | null = null;
  let proxy: MailProxy | null = null;

  if (s.kind === 'honeypot') add('honeypot');
  if (s.honeypotFollowed) add('honeypot_followed');
  if (s.method.toUpperCase() === 'HEAD') add('head_request');

  if (ua === '') {
    add('missing_user_agent');
  } else {
    proxy = s.kind === 'open' ? mailProxy(ua, s.ip) : null;
    const scanner = scannerByUserAgent(ua);
    if (scanner) {
      fingerprint = scanner;
      add('security_scanner');
    } else if (proxy === 'apple') {
      // Prefetched on delivery whether or not anyone reads the message.
      fingerprint = 'apple_privacy_proxy';
      add('apple_privacy_proxy');
    } else if (proxy === 'google' || proxy === 'yahoo') {
      // Fetched when the reader opens the message: a person's open, even
      // though isbot (rightly, for a crawler's view) matches these UAs.
      fingerprint = `${proxy}_image_proxy`;
    } else if (isbot(ua)) {
      add('bot_user_agent');
    }
  }

  const network = scannerByNetwork(s.ip);
  if (network) {
    fingerprint ??= network;
    add('scanner_network');
  }

  if (s.kind !== 'honeypot' && s.secondsSinceSent !== null) {
    const immediate = s.kind === 'open' ? IMMEDIATE_OPEN_SECONDS : IMMEDIATE_CLICK_SECONDS;
    if (s.secondsSinceSent <= immediate) add('immediate_after_send');
    else if (s.secondsSinceSent <= SOON_SECONDS) add('soon_after_send');
  }

  if (s.kind === 'click' && s.otherLinksClickedRecently > 0) {
    add('rapid_multi_click', s.otherLinksClickedRecently >= 2 ? RAPID_MANY_WEIGHT : WEIGHTS.rapid_multi_click);
  }

  // Independent pieces of evidence combine like probabilities (noisy-OR): two
  // weak signals together outweigh either alone, and no sum exceeds 1.
  let human = 1;
  for (const w of fired.values()) human *= 1 - w;
  const score = Math.round((1 - human) * 1000) / 1000;
  const reasons = [...fired.keys()];
  return { decision: { is_bot: score >= BOT_THRESHOLD, bot_score: score, reasons }, fingerprint, proxy };
}
