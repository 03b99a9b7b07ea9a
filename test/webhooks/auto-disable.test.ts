// Auto-disable with a failing receiver and a controlled clock: real attempts
// against a receiver that answers 500 build the failing streak; the check runs
// with its clock moved forward instead of waiting days.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { runOnce } from 'graphile-worker';
import pino from 'pino';
import { buildTaskList } from '../../src/tasks.ts';
import { disableFailingWebhooks } from '../../src/webhooks/auto-disable.ts';
import { samplePayload, WEBHOOK_EVENTS } from '../../src/webhooks/catalog.ts';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.ts';
import { buildTestApp, testConfig, type TestApp, until } from '../helpers.ts';
import { signedIn } from '../dashboard/session.ts';
import { startReceiver, type Receiver } from './receiver.ts';

const DAY = 86_400_000;
// Fast retries so one event gives 7 failed attempts in about a second.
const config = testConfig({ webhookRetryDelays: [0.1, 0.1, 0.1, 0.1, 0.1, 0.1], retryJitter: 0, webhookTimeoutMs: 2_000 });
const RULES = { days: 5, minFailures: 4 };

describe('webhook auto-disable', () => {
  let t: TestApp;
  let dispatcher: WebhookDispatcher;
  const receivers: Receiver[] = [];
  before(async () => {
    t = await buildTestApp({ config });
    dispatcher = new WebhookDispatcher({ db: t.database.db, pool: t.database.pool, config, log: pino({ level: 'silent' }) });
    await dispatcher.start();
  });
  after(async () => {
    await dispatcher.stop();
    await Promise.all(receivers.map((r) => r.close()));
    await t.close();
  });

  const receiver = async (status: number) => {
    const r = await startReceiver((_req, res) => {
      res.writeHead(status);
      res.end();
    });
    receivers.push(r);
    return r;
  };
  const api = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1${url}`, headers: { 'x-api-key': key }, payload: payload as object });
  const processEvents = () => runOnce({ pgPool: t.database.pool, taskList: buildTaskList({ db: t.database.db, config }) });
  const hook = async (id: string) => (await t.database.pool.query('SELECT * FROM webhooks WHERE id = $1', [id])).rows[0];

  test('webhook.disabled is in the catalog with a sample of its payload', () => {
    assert.ok((WEBHOOK_EVENTS as readonly string[]).includes('webhook.disabled'));
    assert.deepEqual(Object.keys(samplePayload('webhook.disabled')).sort(), ['disabled_at', 'last_failure_at', 'reason', 'url', 'webhook_id']);
  });

  test('failing every attempt for 5 days disables the webhook, parks its deliveries and tells the team’s other endpoints', async () => {
    const { key, teamId, session } = await signedIn(t.app, t.database.db);
    const failing = await receiver(500);
    const healthy = await receiver(200);
    const mk = async (url: string, events: string[]) => {
      const res = await api(key, 'POST', '/webhooks', { url, events });
      assert.equal(res.statusCode, 201, res.body);
      return res.json().webhook.id as string;
    };
    // The failing endpoint subscribes to webhook.disabled too: it must not get its own notice.
    const bad = await mk(failing.url, ['email.contact.saved', 'webhook.disabled']);
    const good = await mk(healthy.url, ['webhook.disabled']);
    assert.equal((await api(key, 'POST', '/email/contacts/upsert', { email: 'a@example.com' })).statusCode, 200);
    await processEvents();
    // All 7 attempts: the check skips a webhook row the dispatcher holds (SKIP LOCKED), so it runs once nothing is in flight.
    await until('7 failed attempts', async () => (await hook(bad)).failures_since_success >= 7);
    const streak = await hook(bad);
    assert.ok(streak.failing_since instanceof Date && streak.last_failure_at >= streak.failing_since);

    // Four days on: not yet.
    assert.deepEqual(await disableFailingWebhooks(t.database.db, { ...RULES, now: () => new Date(Date.now() + 4 * DAY) }), []);
    assert.equal((await hook(bad)).is_enabled, true);
    // Fewer failures than the minimum: not on so little evidence, however old.
    assert.deepEqual(await disableFailingWebhooks(t.database.db, { days: 5, minFailures: 1000, now: () => new Date(Date.now() + 6 * DAY) }), []);

    const at = new Date(Date.now() + 6 * DAY);
    const disabled = await disableFailingWebhooks(t.database.db, { ...RULES, now: () => at });
    assert.deepEqual(disabled.map((d) => d.id), [bad]);
    const row = await hook(bad);
    assert.equal(row.is_enabled, false);
    assert.equal(row.auto_disabled_at.getTime(), at.getTime());
    assert.match(row.disabled_reason, /every delivery attempt failed for 5 days/);
    assert.equal((await hook(good)).is_enabled, true, 'the healthy endpoint stays enabled');

    // The notice goes to the healthy endpoint only.
    await processEvents();
    const [got] = await healthy.waitFor(1);
    assert.equal(got!.body.type ?? got!.body.event, 'webhook.disabled');
    const data = got!.body.data ?? got!.body.payload ?? got!.body;
    assert.equal(data.webhook_id, bad);
    assert.equal(data.url, failing.url);
    assert.equal(data.disabled_at, at.toISOString());
    assert.equal(data.last_failure_at, row.last_failure_at.toISOString());
    assert.match(data.reason, /failed for 5 days/);
    const { rows: own } = await t.database.pool.query(`SELECT 1 FROM webhook_deliveries WHERE webhook_id = $1 AND event = 'webhook.disabled'`, [bad]);
    assert.equal(own.length, 0, 'no notice to the disabled webhook itself');

    // New events for the disabled webhook park (pause backlog rules).
    assert.equal((await api(key, 'POST', '/email/contacts/upsert', { email: 'b@example.com' })).statusCode, 200);
    await processEvents();
    const { rows: parked } = await t.database.pool.query(
      `SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1 AND status = 'pending' AND next_attempt_at IS NULL`, [bad]);
    assert.ok(parked[0].n >= 1);

    // The dashboard shows a banner until the webhook is enabled again.
    const page = await session.get('/webhooks');
    assert.match(page.body, /disabled automatically/);
    assert.ok(page.body.includes(failing.url));
    assert.match((await session.get(`/webhooks/${bad}`)).body, /Disabled automatically/);
    const enable = await api(key, 'PATCH', `/webhooks/${bad}`, { is_enabled: true });
    assert.equal(enable.statusCode, 200, enable.body);
    const after = await hook(bad);
    assert.equal(after.auto_disabled_at, null);
    assert.equal(after.failures_since_success, 0);
    assert.doesNotMatch((await session.get('/webhooks')).body, /disabled automatically/);
    void teamId;
  });

  test('a success resets the streak: an endpoint that fails only sometimes is never disabled', async () => {
    const { key } = await signedIn(t.app, t.database.db);
    let status = 500;
    const flaky = await startReceiver((_req, res) => {
      res.writeHead(status);
      res.end();
    });
    receivers.push(flaky);
    const res = await api(key, 'POST', '/webhooks', { url: flaky.url, events: ['email.contact.saved'] });
    const id = res.json().webhook.id as string;
    await api(key, 'POST', '/email/contacts/upsert', { email: 'c@example.com' });
    await processEvents();
    await until('2 failed attempts', async () => (await hook(id)).failures_since_success >= 2);
    status = 200;
    await until('a success', async () => (await hook(id)).last_success_at !== null);
    const row = await hook(id);
    assert.equal(row.failing_since, null);
    assert.equal(row.failures_since_success, 0);
    // (Other tests' webhooks may meet the rule; this one must not.)
    const disabled = await disableFailingWebhooks(t.database.db, { days: 5, minFailures: 1, now: () => new Date(Date.now() + 30 * DAY) });
    assert.ok(!disabled.some((d) => d.id === id));
    assert.equal((await hook(id)).is_enabled, true);
  });

  test('WEBHOOK_AUTO_DISABLE_DAYS=0 never disables', async () => {
    assert.deepEqual(await disableFailingWebhooks(t.database.db, { days: 0, minFailures: 1, now: () => new Date(Date.now() + 365 * DAY) }), []);
  });
});
