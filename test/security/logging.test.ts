// What the API logs (docs/security.md, "What is logged"): request lines and
// failures, never API keys, passwords, webhook secrets or request bodies, even
// at the most verbose level and on a 500.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

describe('logging keeps secrets and bodies out', () => {
  let t: TestApp;
  const lines: string[] = [];
  before(async () => {
    const stream = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    });
    t = await buildTestApp({
      deps: { logger: pino({ level: 'trace' }, stream) },
      beforeReady(app) {
        app.post('/public/v1/__test/boom', async () => {
          throw new Error('boom');
        });
      },
    });
  });
  after(() => t.close());

  test('keys, SMTP passwords, webhook secrets and body values never reach the log', async () => {
    const { key } = await makeTeam(t.database.db);
    const call = (method: string, url: string, payload?: unknown, k = key) =>
      t.app.inject({ method: method as 'POST', url: `/public/v1${url}`, headers: { 'x-api-key': k }, ...(payload === undefined ? {} : { payload: payload as object }) });

    const password = 'pw-Very-Secret-4711';
    const account = await call('POST', '/email/mail-accounts', { host: 'smtp.example.com', port: 587, security: 'starttls', from_email: 'a@example.com', username: 'u', password });
    assert.equal(account.statusCode, 201, account.body);
    const hook = await call('POST', '/webhooks', { url: 'https://93.184.215.14/hook', events: ['email.sent'] });
    assert.equal(hook.statusCode, 201, hook.body);
    const secret: string = hook.json().webhook.secret;
    const bodyMarker = 'Body-Marker-Name-0815';
    assert.equal((await call('POST', '/email/contacts/upsert', { email: 'log@example.com', first_name: bodyMarker })).statusCode, 200);
    assert.equal((await call('POST', '/email/contacts/upsert', { email: 'log@example.com', first_name: 5, note: bodyMarker })).statusCode, 422);
    const wrongKey = `plv_live_${'x'.repeat(43)}`;
    assert.equal((await call('GET', '/ping', undefined, wrongKey)).statusCode, 401);
    assert.equal((await call('POST', '/__test/boom', { password })).statusCode, 500);

    const log = lines.join('');
    assert.match(log, /incoming request/, 'requests are logged at all (the checks below are not vacuous)');
    assert.match(log, /request failed/, 'the 500 is logged');
    for (const [what, value] of [
      ['API key', key],
      ['wrong API key', wrongKey],
      ['SMTP password', password],
      ['webhook secret', secret],
      ['webhook secret (raw part)', secret.slice('whsec_'.length)],
      ['request body value', bodyMarker],
    ] as const) {
      assert.ok(!log.includes(value), `the log holds the ${what}`);
    }
  });
});
