import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
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
  [{ INBOUND_TLS_CERT: '/etc/ssl/mx.pem' }, 'INBOUND_TLS_KEY'],
  [{ INBOUND_TLS_KEY: '/etc/ssl/mx.key' }, 'INBOUND_TLS_CERT'],
  [{ SERVICE_NAME: 'has space' }, 'SERVICE_NAME'],
  [{ RUN_WORKER: 'maybe' }, 'RUN_WORKER'],
  [{ ALLOWED_PRIVATE_TARGETS: '10.0.0.0/33' }, 'ALLOWED_PRIVATE_TARGETS'],
  [{ WEBHOOK_ALLOWED_TARGETS: 'http://x' }, 'WEBHOOK_ALLOWED_TARGETS'],
] as const) {
  test(`a bad ${variable} stops the start with a message naming it (${JSON.stringify(env)})`, () => {
    assert.throws(() => loadConfig(env), (err: unknown) => err instanceof ConfigError && err.message.includes(variable));
  });
}

test('PUBLIC_URL loses its trailing slash', () => {
  assert.equal(loadConfig({ PUBLIC_URL: 'https://mail.example.com/' }).publicUrl, 'https://mail.example.com');
});

describe('ALLOWED_PRIVATE_TARGETS', () => {
  const loopback = ['127.0.0.0/8', '::1', 'localhost'];

  test('unset: loopback for a loopback PUBLIC_URL (a local trial), nothing otherwise', () => {
    for (const url of [undefined, 'http://localhost:3000', 'http://127.0.0.1:8080', 'http://[::1]:3000', 'http://app.localhost', 'http://127.1.2.3']) {
      assert.deepEqual(loadConfig(url ? { PUBLIC_URL: url } : {}).allowedPrivateTargets, loopback, String(url));
    }
    for (const url of ['https://mail.example.com', 'http://10.0.0.5:3000', 'http://192.168.1.20', 'https://localhost.example.com']) {
      assert.deepEqual(loadConfig({ PUBLIC_URL: url }).allowedPrivateTargets, [], url);
    }
  });

  test('not tied to the embedded database: a public PUBLIC_URL allows nothing with or without DATABASE_URL', () => {
    assert.deepEqual(loadConfig({ PUBLIC_URL: 'https://mail.example.com' }).allowedPrivateTargets, []);
    assert.deepEqual(loadConfig({ PUBLIC_URL: 'https://mail.example.com', DATABASE_URL: 'postgres://x/y', APP_SECRET: secret }).allowedPrivateTargets, []);
  });

  test('set, it replaces the default; `none` allows nothing even on a local trial', () => {
    assert.deepEqual(loadConfig({ ALLOWED_PRIVATE_TARGETS: '10.0.0.0/8, smtp.internal' }).allowedPrivateTargets, ['10.0.0.0/8', 'smtp.internal']);
    assert.deepEqual(loadConfig({ ALLOWED_PRIVATE_TARGETS: 'none' }).allowedPrivateTargets, []);
    assert.match(loadConfig({ ALLOWED_PRIVATE_TARGETS: 'none' }).allowedPrivateTargetsSource, /ALLOWED_PRIVATE_TARGETS/);
  });

  test('WEBHOOK_ALLOWED_TARGETS is an alias; both set are joined', () => {
    assert.deepEqual(loadConfig({ WEBHOOK_ALLOWED_TARGETS: '127.0.0.1', PUBLIC_URL: 'https://x.example' }).allowedPrivateTargets, ['127.0.0.1']);
    assert.deepEqual(
      loadConfig({ ALLOWED_PRIVATE_TARGETS: '10.0.0.0/8,127.0.0.1', WEBHOOK_ALLOWED_TARGETS: '127.0.0.1,hooks.internal' }).allowedPrivateTargets,
      ['10.0.0.0/8', '127.0.0.1', 'hooks.internal'],
    );
    assert.match(loadConfig({ WEBHOOK_ALLOWED_TARGETS: '127.0.0.1' }).allowedPrivateTargetsSource, /WEBHOOK_ALLOWED_TARGETS/);
  });
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
