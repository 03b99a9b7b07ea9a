// Environment parsing and validation, done once at start-up. A bad value stops
// the start with a message naming the variable.
import { isAbsolute, resolve } from 'node:path';
import { LOOPBACK_TARGETS, parseAddress, parseAllowList } from './lib/net-guard.ts';
import { loadIntakeConfig, type IntakeConfig } from './config-intake.ts';
import { loadProviderIntakeConfig, type ProviderIntakeConfig } from './config-providers.ts';
import { loadInboundConfig, type InboundConfig } from './config-inbound.ts';
import { renderLimitsFromEnv, type RenderLimits } from './lib/render-limits.ts';
import { RANDOM_PAGE_COST } from './db/pool.ts';

export type Config = {
  port: number;
  host: string;
  databaseUrl: string | undefined;
  dataDir: string;
  /**
   * `random_page_cost` of Plover's database sessions (src/db/pool.ts), or null
   * to plan with the server's own setting.
   */
  databaseRandomPageCost: number | null;
  redisUrl: string | undefined;
  appSecret: string | undefined;
  publicUrl: string;
  rateLimitPerMinute: number;
  serviceName: string;
  logLevel: string;
  /** `pretty` (readable lines, for a terminal), `json` (one object a line, for collectors) or `auto`: pretty when stdout is a terminal. */
  logFormat: 'auto' | 'pretty' | 'json';
  /** Body limit of the bulk routes (bulk upsert, bulk unsubscribe, batch send). */
  bodyLimitBytes: number;
  /** Per-route body limits, JSON limits, server timeouts, /metrics token (config-intake.ts). */
  intake: IntakeConfig;
  /** Provider event webhooks and IMAP polling (config-providers.ts). */
  inboundProviders: ProviderIntakeConfig;
  /** Mail that comes back: inbound listener, return-path domain, soft-bounce suppression (config-inbound.ts). */
  inbound: InboundConfig;
  workerConcurrency: number;
  runWorker: boolean;
  /** Dashboard sign-in attempts per minute, per (e-mail address, client IP). */
  signInRateLimitPerMinute: number;
  /** Per delivery attempt. */
  webhookTimeoutMs: number;
  /** Seconds before attempts 2..7 (docs/api.md, "Retries"). */
  webhookRetryDelays: number[];
  /** Host names, IPs and CIDRs that webhooks and SMTP hosts may use although not public (webhooks also over http). */
  allowedPrivateTargets: string[];
  /** Where allowedPrivateTargets came from, for the start banner. */
  allowedPrivateTargetsSource: string;
  /** A worker process silent this long is dead: its jobs are unlocked. */
  workerDeadAfterS: number;
  /** Deliveries in flight per worker process. */
  webhookConcurrency: number;
  /** A disabled webhook's parked deliveries older than this many days are marked failed. */
  webhookPausedBacklogDays: number;
  /** A disabled webhook keeps at most this many pending deliveries (the newest); older ones are marked failed. */
  webhookPausedBacklogMax: number;
  /** Seconds before each retry of a deferred (4xx) send; its length is the number of retries. */
  sendRetryDelays: number[];
  /** Each retry (webhook and SMTP) waits its scheduled delay ± this fraction, drawn uniformly (RETRY_JITTER_PERCENT). */
  retryJitter: number;
  /** Seconds after which a send left in `sending` (a worker died mid-send) is marked failed, never resent. */
  sendLeaseSeconds: number;
  /** Messages one pooled SMTP connection carries before it is closed and a new one opened (nodemailer's maxMessages). */
  smtpMessagesPerConnection: number;
  /** Characters of large rendered mail a worker's send jobs hold, beyond one message per job (mail/render-ahead.ts). */
  sendRenderedChars: number;
  /** Caps on parsing and rendering templates (RENDER_* variables; lib/render-limits.ts). */
  render: RenderLimits;

  /** Tags one contact may hold in total (an upsert that would pass it is refused). */
  contactMaxTags: number;
  /** Hit rows stored per message; past it hits only raise the message's raw totals. */
  trackingMaxHitsPerMessage: number;
  /** Invalid or unknown tracking links answered per client IP and minute before a bare 429. */
  trackingBadLinksPerMinute: number;
  /** Retention windows in days (0 = keep forever) and its batching (ops/retention.ts). */
  retention: {
    webhookDeliveriesDays: number;
    eventsDays: number;
    messagesDays: number;
    trackingHitsDays: number;
    batchSize: number;
    pauseMs: number;
  };
  /** A webhook whose every attempt failed for this many days is disabled (0 = never). */
  webhookAutoDisableDays: number;
  /** ... and only after at least this many failed attempts in that streak. */
  webhookAutoDisableMinFailures: number;
};

export class ConfigError extends Error {}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function int(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be an integer, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** `DATABASE_RANDOM_PAGE_COST`: a cost from 0.1 to 100, or `server` for the server's own setting. */
function randomPageCost(env: NodeJS.ProcessEnv): number | null {
  const raw = str(env, 'DATABASE_RANDOM_PAGE_COST');
  if (raw === undefined) return RANDOM_PAGE_COST;
  if (raw.toLowerCase() === 'server') return null;
  const n = /^\d+(\.\d+)?$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= 0.1 && n <= 100)) throw new ConfigError(`DATABASE_RANDOM_PAGE_COST must be a number from 0.1 to 100, or server, got "${raw}"`);
  return n;
}

function str(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

function url(env: NodeJS.ProcessEnv, name: string, protocols: string[]): string | undefined {
  const v = str(env, name);
  if (v === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(v);
  } catch {
    throw new ConfigError(`${name} must be a URL, got "${v}"`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(`${name} must use ${protocols.join(' or ')}, got "${parsed.protocol}"`);
  }
  return v;
}

// Six delays in seconds (decimals allowed, so tests can compress the schedule).
function retryDelays(env: NodeJS.ProcessEnv, name: string, fallback: number[]): number[] {
  const raw = str(env, name);
  if (raw === undefined) return fallback;
  const parts = raw.split(',').map((x) => x.trim());
  if (parts.length !== fallback.length || parts.some((x) => !/^\d+(\.\d+)?$/.test(x) || Number(x) > 86_400)) {
    throw new ConfigError(`${name} must be ${fallback.length} comma-separated delays in seconds (0 to 86400), got "${raw}"`);
  }
  return parts.map(Number);
}

function seconds(env: NodeJS.ProcessEnv, name: string, fallback: number[]): number[] {
  const raw = str(env, name);
  if (raw === undefined) return fallback;
  const parts = raw.split(',').map((p) => p.trim());
  if (parts.length > 20 || parts.some((p) => !/^\d{1,6}$/.test(p))) {
    throw new ConfigError(`${name} must be a comma-separated list of at most 20 whole numbers of seconds, got "${raw}"`);
  }
  return parts.map(Number);
}

function isLoopbackUrl(publicUrl: string): boolean {
  const host = new URL(publicUrl).hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  return parseAddress(host)?.range() === 'loopback';
}

/**
 * ALLOWED_PRIVATE_TARGETS, and its old name WEBHOOK_ALLOWED_TARGETS: when both
 * are set the lists are joined (an upgrade that adds the new name keeps what
 * the old one allowed). Unset, a loopback PUBLIC_URL (a local trial) allows
 * loopback and anything else allows nothing; `none` says nothing explicitly.
 */
function privateTargets(env: NodeJS.ProcessEnv, publicUrl: string): { allowedPrivateTargets: string[]; allowedPrivateTargetsSource: string } {
  const named = (['ALLOWED_PRIVATE_TARGETS', 'WEBHOOK_ALLOWED_TARGETS'] as const).filter((n) => str(env, n) !== undefined);
  const entries: string[] = [];
  for (const name of named) {
    const list = str(env, name)!.split(',').map((x) => x.trim()).filter(Boolean);
    if (list.length === 1 && list[0]!.toLowerCase() === 'none') continue;
    try {
      parseAllowList(list);
    } catch (e) {
      throw new ConfigError(`${name}: ${(e as Error).message}`);
    }
    for (const entry of list) if (!entries.includes(entry)) entries.push(entry);
  }
  if (named.length > 0) return { allowedPrivateTargets: entries, allowedPrivateTargetsSource: `set by ${named.join(' and ')}` };
  return isLoopbackUrl(publicUrl)
    ? { allowedPrivateTargets: [...LOOPBACK_TARGETS], allowedPrivateTargetsSource: 'default for a loopback PUBLIC_URL' }
    : { allowedPrivateTargets: [], allowedPrivateTargetsSource: 'default' };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const port = int(env, 'PORT', 3000, 0, 65535);
  const host = str(env, 'HOST') ?? '0.0.0.0';
  const databaseUrl = url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']);
  const dataDirRaw = str(env, 'DATA_DIR') ?? './data';
  const dataDir = isAbsolute(dataDirRaw) ? dataDirRaw : resolve(process.cwd(), dataDirRaw);
  const databaseRandomPageCost = randomPageCost(env);
  const redisUrl = url(env, 'REDIS_URL', ['redis:', 'rediss:']);
  const appSecret = str(env, 'APP_SECRET');
  if (appSecret !== undefined && appSecret.length < 32) {
    throw new ConfigError('APP_SECRET must be at least 32 characters (use `openssl rand -hex 32`)');
  }
  if (databaseUrl !== undefined && appSecret === undefined) {
    throw new ConfigError('APP_SECRET is required when DATABASE_URL is set (use `openssl rand -hex 32`)');
  }
  const publicUrl = (url(env, 'PUBLIC_URL', ['http:', 'https:']) ?? `http://localhost:${port}`).replace(/\/+$/, '');
  const rateLimitPerMinute = int(env, 'RATE_LIMIT_PER_MINUTE', 1200, 1, 10_000_000);
  const serviceName = str(env, 'SERVICE_NAME') ?? 'Plover';
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(serviceName)) {
    throw new ConfigError('SERVICE_NAME must be 1-64 letters, digits, dots, dashes or underscores (it goes into User-Agent)');
  }
  const logLevel = str(env, 'LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  const logFormat = (str(env, 'LOG_FORMAT') ?? 'auto').toLowerCase();
  if (logFormat !== 'auto' && logFormat !== 'pretty' && logFormat !== 'json') throw new ConfigError('LOG_FORMAT must be auto, pretty or json');
  const bodyLimitBytes = int(env, 'BODY_LIMIT_BYTES', 10 * 1024 * 1024, 1024, 1024 * 1024 * 1024);
  const workerConcurrency = int(env, 'WORKER_CONCURRENCY', 10, 1, 1000);
  const runWorkerRaw = (str(env, 'RUN_WORKER') ?? 'true').toLowerCase();
  if (!['true', 'false', '1', '0'].includes(runWorkerRaw)) throw new ConfigError('RUN_WORKER must be true or false');
  const runWorker = runWorkerRaw === 'true' || runWorkerRaw === '1';
  const signInRateLimitPerMinute = int(env, 'SIGN_IN_RATE_LIMIT_PER_MINUTE', 10, 1, 10_000);
  const workerDeadAfterS = int(env, 'WORKER_DEAD_AFTER_S', 30, 3, 3600);
  const webhookTimeoutMs = int(env, 'WEBHOOK_TIMEOUT_MS', 10_000, 100, 120_000);
  const webhookRetryDelays = retryDelays(env, 'WEBHOOK_RETRY_DELAYS', [30, 120, 600, 1800, 7200, 21600]);
  const { allowedPrivateTargets, allowedPrivateTargetsSource } = privateTargets(env, publicUrl);
  const webhookConcurrency = int(env, 'WEBHOOK_CONCURRENCY', 100, 1, 10_000);
  const webhookPausedBacklogDays = int(env, 'WEBHOOK_PAUSED_BACKLOG_DAYS', 7, 1, 365);
  const webhookPausedBacklogMax = int(env, 'WEBHOOK_PAUSED_BACKLOG_MAX', 100_000, 1, 10_000_000);
  const sendRetryDelays = seconds(env, 'SEND_RETRY_DELAYS', [60, 300, 1800, 7200]);
  const sendLeaseSeconds = int(env, 'SEND_LEASE_SECONDS', 600, 60, 86_400);
  const smtpMessagesPerConnection = int(env, 'SMTP_MESSAGES_PER_CONNECTION', 100, 1, 100_000);
  const sendRenderedChars = int(env, 'SEND_RENDERED_CHARS', 32 * 1024 * 1024, 1024 * 1024, 1024 * 1024 * 1024);
  const retryJitter = int(env, 'RETRY_JITTER_PERCENT', 20, 0, 50) / 100;
  const intake = loadIntakeConfig(env, (name, fallback, min, max) => int(env, name, fallback, min, max), (m) => new ConfigError(m));
  const inbound = loadInboundConfig((name, fallback, min, max) => int(env, name, fallback, min, max), (name) => str(env, name), (m) => new ConfigError(m));
  let render: RenderLimits;
  try {
    render = renderLimitsFromEnv(env);
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }
  const inboundProviders = loadProviderIntakeConfig((name, fallback, min, max) => int(env, name, fallback, min, max));
  const contactMaxTags = int(env, 'CONTACT_MAX_TAGS', 100, 1, 10_000);
  const trackingMaxHitsPerMessage = int(env, 'TRACKING_MAX_HITS_PER_MESSAGE', 1000, 0, 1_000_000);
  const trackingBadLinksPerMinute = int(env, 'TRACKING_BAD_LINKS_PER_MINUTE', 60, 1, 1_000_000);
  const retention = {
    webhookDeliveriesDays: int(env, 'RETENTION_WEBHOOK_DELIVERIES_DAYS', 30, 0, 36_500),
    eventsDays: int(env, 'RETENTION_EVENTS_DAYS', 90, 0, 36_500),
    messagesDays: int(env, 'RETENTION_MESSAGES_DAYS', 90, 0, 36_500),
    trackingHitsDays: int(env, 'RETENTION_TRACKING_HITS_DAYS', 90, 0, 36_500),
    batchSize: int(env, 'RETENTION_BATCH_SIZE', 2000, 1, 50_000),
    pauseMs: int(env, 'RETENTION_PAUSE_MS', 200, 0, 60_000),
  };
  const webhookAutoDisableDays = int(env, 'WEBHOOK_AUTO_DISABLE_DAYS', 5, 0, 365);
  const webhookAutoDisableMinFailures = int(env, 'WEBHOOK_AUTO_DISABLE_MIN_FAILURES', 10, 1, 1_000_000);
  return {
    intake, inbound, inboundProviders, retention, webhookAutoDisableDays, webhookAutoDisableMinFailures,
    port, host, databaseUrl, dataDir, databaseRandomPageCost, redisUrl, appSecret, publicUrl, rateLimitPerMinute,
    serviceName, logLevel, logFormat, bodyLimitBytes, workerConcurrency, runWorker, signInRateLimitPerMinute,
    workerDeadAfterS, webhookTimeoutMs, webhookRetryDelays, allowedPrivateTargets, allowedPrivateTargetsSource,
    webhookConcurrency,
    sendRetryDelays, sendLeaseSeconds, smtpMessagesPerConnection, sendRenderedChars, retryJitter,
    webhookPausedBacklogDays,
    webhookPausedBacklogMax,
    render,
    contactMaxTags, trackingMaxHitsPerMessage, trackingBadLinksPerMinute,
  };
}
