// Settings of request intake: body limits per route class, JSON limits, the
// HTTP server's timeouts and connection caps, heavy-request concurrency, the
// metrics token and sign-in throttling. Parsed once with the rest of the
// configuration (config.ts); kept here so the intake code and its settings
// live side by side.

export type IntakeConfig = {
  /** Template create (and the dashboard template editor). */
  templateBodyLimitBytes: number;
  /** Every other API route. */
  apiBodyLimitBytes: number;
  /** Dashboard forms. */
  dashboardBodyLimitBytes: number;
  /** A CSV uploaded to the dashboard's contact import, streamed to disk. */
  dashboardImportLimitBytes: number;
  /** Values (object members and array elements, nested ones included) in one JSON body. */
  jsonMaxValues: number;
  /** JSON bodies larger than this are parsed in the untrusted pool, off the event loop. */
  jsonPoolThresholdBytes: number;
  /** Bulk-limit requests of one team in flight in one process; more are 429. */
  heavyRequestsPerTeam: number;
  /** Bulk-limit requests of all teams together in flight in one process; more are 503. */
  heavyRequestsTotal: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /** Socket inactivity (no byte either way) before it is closed. */
  connectionTimeoutMs: number;
  maxRequestsPerSocket: number;
  maxConnections: number;
  /** Bearer token for /metrics; unset: /metrics is refused. */
  metricsToken: string | undefined;
  /** Sign-in attempts a minute from one client IP, all addresses together. */
  signInIpRateLimitPerMinute: number | undefined;
};

export const MIB = 1024 * 1024;

type IntReader = (name: string, fallback: number, min: number, max: number) => number;

export function loadIntakeConfig(env: NodeJS.ProcessEnv, int: IntReader, fail: (message: string) => Error): IntakeConfig {
  // The bulk limit stays BODY_LIMIT_BYTES (config.bodyLimitBytes): it was the
  // one global limit, and the bulk routes are the ones it was sized for.
  const templateBodyLimitBytes = int('TEMPLATE_BODY_LIMIT_BYTES', 2 * MIB, 1024, 1024 * MIB);
  const apiBodyLimitBytes = int('API_BODY_LIMIT_BYTES', 256 * 1024, 1024, 1024 * MIB);
  const dashboardBodyLimitBytes = int('DASHBOARD_BODY_LIMIT_BYTES', 64 * 1024, 1024, 1024 * MIB);
  const dashboardImportLimitBytes = int('DASHBOARD_IMPORT_LIMIT_BYTES', 200 * MIB, 1024, 16 * 1024 * MIB);
  const headersTimeoutMs = int('HTTP_HEADERS_TIMEOUT_MS', 10_000, 100, 600_000);
  const requestTimeoutMs = int('HTTP_REQUEST_TIMEOUT_MS', 60_000, 100, 3_600_000);
  // Node refuses a server whose headers timeout exceeds its request timeout.
  if (headersTimeoutMs > requestTimeoutMs) {
    throw fail(`HTTP_HEADERS_TIMEOUT_MS (${headersTimeoutMs}) must not exceed HTTP_REQUEST_TIMEOUT_MS (${requestTimeoutMs})`);
  }
  const metricsToken = env.METRICS_TOKEN?.trim() || undefined;
  if (metricsToken !== undefined && metricsToken.length < 16) throw fail('METRICS_TOKEN must be at least 16 characters');
  const ipLimitRaw = env.SIGN_IN_IP_RATE_LIMIT_PER_MINUTE;
  return {
    templateBodyLimitBytes,
    apiBodyLimitBytes,
    dashboardBodyLimitBytes,
    dashboardImportLimitBytes,
    jsonMaxValues: int('JSON_MAX_VALUES', 100_000, 100, 10_000_000),
    jsonPoolThresholdBytes: int('JSON_POOL_THRESHOLD_BYTES', 64 * 1024, 0, 1024 * MIB),
    heavyRequestsPerTeam: int('HEAVY_REQUESTS_PER_TEAM', 2, 1, 1000),
    heavyRequestsTotal: int('HEAVY_REQUESTS_TOTAL', 4, 1, 10_000),
    headersTimeoutMs,
    requestTimeoutMs,
    keepAliveTimeoutMs: int('HTTP_KEEP_ALIVE_TIMEOUT_MS', 5_000, 100, 600_000),
    connectionTimeoutMs: int('HTTP_CONNECTION_TIMEOUT_MS', 30_000, 100, 3_600_000),
    maxRequestsPerSocket: int('HTTP_MAX_REQUESTS_PER_SOCKET', 0, 0, 10_000_000),
    maxConnections: int('HTTP_MAX_CONNECTIONS', 10_000, 1, 10_000_000),
    metricsToken,
    signInIpRateLimitPerMinute:
      ipLimitRaw === undefined || ipLimitRaw.trim() === '' ? undefined : int('SIGN_IN_IP_RATE_LIMIT_PER_MINUTE', 30, 1, 100_000),
  };
}
