// Amazon SNS message verification (SES bounce, complaint and delivery
// notifications reach us through an SNS topic's HTTPS subscription).
//
// SNS signs a canonical string of the message's fields with the private key
// of the certificate at SigningCertURL: SignatureVersion 1 with SHA1withRSA,
// 2 with SHA256withRSA. The certificate is only ever fetched over https from
// an `sns.<region>.amazonaws.com` host (a forged message naming a certificate
// of its own elsewhere is refused before any fetch); the fetch is injectable
// so tests sign with a certificate and key they generate.
import { createVerify, X509Certificate } from 'node:crypto';
import { request } from 'undici';

export type SnsMessage = {
  Type: 'Notification' | 'SubscriptionConfirmation' | 'UnsubscribeConfirmation';
  MessageId: string;
  TopicArn: string;
  Message: string;
  Timestamp: string;
  SignatureVersion: '1' | '2';
  Signature: string;
  SigningCertURL: string;
  Subject?: string;
  SubscribeURL?: string;
  Token?: string;
};

/** Fetches a PEM certificate (production: https from an SNS host only). */
export type CertificateFetcher = (url: string) => Promise<string>;
/** Visits a SubscribeURL to confirm a subscription (production: https GET to an SNS host). */
export type SubscriptionConfirmer = (url: string) => Promise<void>;

const SNS_HOST = /^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$/;
// SNS certificates are ~2 KB; anything much larger is not one.
const MAX_CERT_BYTES = 16 * 1024;
const FETCH_TIMEOUT_MS = 5_000;

/** True for an https URL on an SNS host (the only places a certificate or a confirmation may come from). */
export function isSnsUrl(raw: string): boolean {
  if (!URL.canParse(raw)) return false;
  const u = new URL(raw);
  return u.protocol === 'https:' && u.port === '' && u.username === '' && u.password === '' && SNS_HOST.test(u.hostname);
}

const TYPES = new Set(['Notification', 'SubscriptionConfirmation', 'UnsubscribeConfirmation']);

/** The message's shape, or a reason it is not an SNS message. */
export function asSnsMessage(body: unknown): SnsMessage | string {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return 'the body is not a JSON object';
  const m = body as Record<string, unknown>;
  if (typeof m.Type !== 'string' || !TYPES.has(m.Type)) return 'Type must be Notification, SubscriptionConfirmation or UnsubscribeConfirmation';
  for (const field of ['MessageId', 'TopicArn', 'Message', 'Timestamp', 'Signature', 'SigningCertURL']) {
    if (typeof m[field] !== 'string') return `${field} must be a string`;
  }
  if (m.SignatureVersion !== '1' && m.SignatureVersion !== '2') return 'SignatureVersion must be "1" or "2"';
  if (m.Type !== 'Notification' && (typeof m.SubscribeURL !== 'string' || typeof m.Token !== 'string')) {
    return 'SubscribeURL and Token must be strings';
  }
  if (m.Subject !== undefined && m.Subject !== null && typeof m.Subject !== 'string') return 'Subject must be a string';
  return m as unknown as SnsMessage;
}

/** The string SNS signs: named fields in this order, each as "Name\nvalue\n". */
export function snsStringToSign(m: SnsMessage): string {
  const fields =
    m.Type === 'Notification'
      ? ['Message', 'MessageId', ...(typeof m.Subject === 'string' ? ['Subject'] : []), 'Timestamp', 'TopicArn', 'Type']
      : ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'];
  return fields.map((f) => `${f}\n${(m as Record<string, unknown>)[f] as string}\n`).join('');
}

async function fetchBounded(url: string): Promise<string> {
  // undici's request never follows a redirect (a 3xx is refused below).
  const res = await request(url, { method: 'GET', headersTimeout: FETCH_TIMEOUT_MS, bodyTimeout: FETCH_TIMEOUT_MS });
  if (res.statusCode !== 200) {
    await res.body.dump();
    throw new Error(`HTTP ${res.statusCode}`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    size += (chunk as Buffer).length;
    if (size > MAX_CERT_BYTES) {
      res.body.destroy();
      throw new Error('answer too large');
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Production fetcher: refuses any URL but an SNS host's, never follows redirects, caps the answer. */
export const fetchSnsCertificate: CertificateFetcher = async (url) => {
  if (!isSnsUrl(url)) throw new Error('not an SNS certificate URL');
  return fetchBounded(url);
};

/** Production confirmer: GET of the SubscribeURL, on an SNS host only. */
export const confirmSnsSubscription: SubscriptionConfirmer = async (url) => {
  if (!isSnsUrl(url)) throw new Error('not an SNS URL');
  await fetchBounded(url);
};

/**
 * Certificates by URL: SNS signs every message of a region with one
 * certificate for months, so one fetch serves them all. Bounded, and a
 * failed fetch is not cached.
 */
export class CertificateCache {
  private readonly certs = new Map<string, Promise<X509Certificate>>();
  private readonly fetcher: CertificateFetcher;
  private readonly max: number;
  constructor(fetcher: CertificateFetcher, max = 32) {
    this.fetcher = fetcher;
    this.max = max;
  }
  get(url: string): Promise<X509Certificate> {
    let cert = this.certs.get(url);
    if (!cert) {
      if (this.certs.size >= this.max) this.certs.delete(this.certs.keys().next().value!);
      cert = this.fetcher(url).then((pem) => new X509Certificate(pem));
      cert.catch(() => this.certs.delete(url));
      this.certs.set(url, cert);
    }
    return cert;
  }
}

export type SnsVerdict = { ok: true } | { ok: false; reason: 'certificate_url' | 'certificate' | 'signature' };

/** Checks the certificate URL, fetches the certificate (cached) and verifies the signature. */
export async function verifySnsMessage(m: SnsMessage, certs: CertificateCache, now = new Date()): Promise<SnsVerdict> {
  if (!isSnsUrl(m.SigningCertURL)) return { ok: false, reason: 'certificate_url' };
  let cert: X509Certificate;
  try {
    cert = await certs.get(m.SigningCertURL);
  } catch {
    return { ok: false, reason: 'certificate' };
  }
  if (new Date(cert.validFrom) > now || new Date(cert.validTo) < now) return { ok: false, reason: 'certificate' };
  const verifier = createVerify(m.SignatureVersion === '1' ? 'RSA-SHA1' : 'RSA-SHA256');
  verifier.update(snsStringToSign(m), 'utf8');
  let valid = false;
  try {
    valid = verifier.verify(cert.publicKey, m.Signature, 'base64');
  } catch {
    valid = false;
  }
  return valid ? { ok: true } : { ok: false, reason: 'signature' };
}
