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
