import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';

const secret = 'x'.repeat(64);

test('defaults', () => {
  const c = loadConfig({});
  assert.equal(c.port, 3000);
  assert.equal(c.rateLimitPerMinute, 1200);
  assert.equal(c.serviceName, 'Plover');
  assert.equal(c.databaseUrl, undefined);
  assert.match(c.dataDir, /data$/);
  assert.equal(c.publicUrl, 'http://localhost:3000');
  assert.equal(c.bodyLimitBytes, 10 * 1024 * 1024);
});

for (const [env, variable] of [
  [{ PORT: 'abc' }, 'PORT'],
  [{ PORT: '70000' }, 'PORT'],
  [{ RATE_LIMIT_PER_MINUTE: '0' }, 'RATE_LIMIT_PER_MINUTE'],
  [{ RATE_LIMIT_PER_MINUTE: '12.5' }, 'RATE_LIMIT_PER_MINUTE'],
  [{ DATABASE_URL: 'mysql://x' , APP_SECRET: secret }, 'DATABASE_URL'],
  [{ DATABASE_URL: 'not a url', APP_SECRET: secret }, 'DATABASE_URL'],
  [{ DATABASE_URL: 'postgres://x/y' }, 'APP_SECRET'],
  [{ APP_SECRET: 'short' }, 'APP_SECRET'],
  [{ REDIS_URL: 'http://x' }, 'REDIS_URL'],
  [{ PUBLIC_URL: 'ftp://x' }, 'PUBLIC_URL'],
  [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
  [{ SERVICE_NAME: 'has space' }, 'SERVICE_NAME'],
  [{ RUN_WORKER: 'maybe' }, 'RUN_WORKER'],
] as const) {
  test(`a bad ${variable} stops the start with a message naming it (${JSON.stringify(env)})`, () => {
    assert.throws(() => loadConfig(env), (err: unknown) => err instanceof ConfigError && err.message.includes(variable));
  });
}

test('PUBLIC_URL loses its trailing slash', () => {
  assert.equal(loadConfig({ PUBLIC_URL: 'https://mail.example.com/' }).publicUrl, 'https://mail.example.com');
});

test('request intake: defaults, and BODY_LIMIT_BYTES stays the bulk limit', () => {
  const c = loadConfig({});
  assert.deepEqual(
    {
      bulk: c.bodyLimitBytes,
      template: c.intake.templateBodyLimitBytes,
      api: c.intake.apiBodyLimitBytes,
      dashboard: c.intake.dashboardBodyLimitBytes,
      values: c.intake.jsonMaxValues,
      heavy: c.intake.heavyRequestsPerTeam,
      headers: c.intake.headersTimeoutMs,
      request: c.intake.requestTimeoutMs,
      metrics: c.intake.metricsToken,
    },
    { bulk: 10 * 1024 * 1024, template: 2 * 1024 * 1024, api: 256 * 1024, dashboard: 64 * 1024, values: 100_000, heavy: 2, headers: 10_000, request: 60_000, metrics: undefined },
  );
  assert.equal(loadConfig({ BODY_LIMIT_BYTES: '5000000' }).bodyLimitBytes, 5_000_000);
});

for (const [env, variable] of [
  [{ API_BODY_LIMIT_BYTES: '10' }, 'API_BODY_LIMIT_BYTES'],
  [{ HEAVY_REQUESTS_PER_TEAM: '0' }, 'HEAVY_REQUESTS_PER_TEAM'],
  [{ HTTP_HEADERS_TIMEOUT_MS: '70000', HTTP_REQUEST_TIMEOUT_MS: '60000' }, 'HTTP_HEADERS_TIMEOUT_MS'],
  [{ METRICS_TOKEN: 'short' }, 'METRICS_TOKEN'],
  [{ JSON_MAX_VALUES: 'many' }, 'JSON_MAX_VALUES'],
] as const) {
  test(`a bad ${variable} stops the start (${JSON.stringify(env)})`, () => {
    assert.throws(() => loadConfig(env), (err: unknown) => err instanceof ConfigError && err.message.includes(variable));
  });
}
