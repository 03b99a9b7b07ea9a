// Settings of mail that comes back: the inbound SMTP listener, the domain of
// the signed return-path and reply addresses, the feedback-loop address, the
// listener's caps, and when repeated soft bounces suppress an address. Parsed
// once with the rest of the configuration (config.ts).

export type InboundConfig = {
  /** Port of the inbound SMTP listener; undefined: no listener. */
  smtpPort: number | undefined;
  /** Address the listener binds. */
  smtpHost: string;
  /** The domain whose MX points at the listener; return-path and reply addresses live under it. */
  domain: string | undefined;
  /** The feedback-loop address registered with mailbox providers (under `domain`); takes ARF reports. */
  fblAddress: string | undefined;
  /** Largest message the listener takes, bytes. */
  maxMessageBytes: number;
  /** Recipients one message may have. */
  maxRecipients: number;
  /** Connections at once. */
  maxClients: number;
  /** Socket inactivity before the listener hangs up, ms. */
  socketTimeoutMs: number;
  /** MIME parts of one message at most; past it the message is dropped unparsed. */
  maxMimeParts: number;
  /** Nesting depth of MIME parts at most. */
  maxMimeDepth: number;
  /** PEM files of the listener's certificate (chain) and key: STARTTLS is offered only with both. */
  tlsCertFile: string | undefined;
  tlsKeyFile: string | undefined;
  /** Soft bounces of one address within softBounceDays that suppress it (reason `soft_bounce`). */
  softBounceLimit: number;
  softBounceDays: number;
};

type IntReader = (name: string, fallback: number, min: number, max: number) => number;
type StrReader = (name: string) => string | undefined;

const DOMAIN = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$|^localhost$/;

export function loadInboundConfig(int: IntReader, str: StrReader, fail: (m: string) => Error): InboundConfig {
  const rawPort = str('INBOUND_SMTP_PORT');
  const smtpPort = rawPort === undefined ? undefined : int('INBOUND_SMTP_PORT', 25, 0, 65535);
  const domain = str('INBOUND_DOMAIN')?.toLowerCase().replace(/\.$/, '');
  if (domain !== undefined && !DOMAIN.test(domain)) throw fail(`INBOUND_DOMAIN must be a domain name such as bounces.example.com, got "${domain}"`);
  const fblAddress = str('INBOUND_FBL_ADDRESS')?.toLowerCase();
  if (fblAddress !== undefined) {
    if (domain === undefined) throw fail('INBOUND_FBL_ADDRESS needs INBOUND_DOMAIN (the address lives under it)');
    const at = fblAddress.lastIndexOf('@');
    if (at < 1 || fblAddress.slice(at + 1) !== domain || !/^[a-z0-9._+-]{1,64}$/.test(fblAddress.slice(0, at))) {
      throw fail(`INBOUND_FBL_ADDRESS must be an address under INBOUND_DOMAIN (${domain}), got "${fblAddress}"`);
    }
  }
  const tlsCertFile = str('INBOUND_TLS_CERT');
  const tlsKeyFile = str('INBOUND_TLS_KEY');
  if ((tlsCertFile === undefined) !== (tlsKeyFile === undefined)) throw fail('INBOUND_TLS_CERT and INBOUND_TLS_KEY go together (PEM files of the certificate and its key)');
  if (smtpPort !== undefined && domain === undefined) throw fail('INBOUND_SMTP_PORT needs INBOUND_DOMAIN (the listener takes mail only for it)');
  return {
    smtpPort,
    smtpHost: str('INBOUND_SMTP_HOST') ?? '0.0.0.0',
    domain,
    fblAddress,
    maxMessageBytes: int('INBOUND_MAX_MESSAGE_BYTES', 10 * 1024 * 1024, 1024, 100 * 1024 * 1024),
    maxRecipients: int('INBOUND_MAX_RECIPIENTS', 10, 1, 1000),
    maxClients: int('INBOUND_MAX_CLIENTS', 200, 1, 100_000),
    socketTimeoutMs: int('INBOUND_SOCKET_TIMEOUT_MS', 60_000, 1000, 3_600_000),
    maxMimeParts: int('INBOUND_MAX_MIME_PARTS', 100, 1, 10_000),
    maxMimeDepth: int('INBOUND_MAX_MIME_DEPTH', 10, 1, 100),
    tlsCertFile,
    tlsKeyFile,
    softBounceLimit: int('SOFT_BOUNCE_LIMIT', 3, 1, 1000),
    softBounceDays: int('SOFT_BOUNCE_DAYS', 7, 1, 365),
  };
}

/** Defaults (tests, tools that build feedback without a full configuration). */
export const DEFAULT_INBOUND: InboundConfig = loadInboundConfig(
  (_n, fallback) => fallback,
  () => undefined,
  (m) => new Error(m),
);
