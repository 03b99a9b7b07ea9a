// Pause and recover (the contract's webhook rules): events that occur while a
// webhook is disabled wait as pending and go out oldest first after the
// enable, signed with the new secret; the paused backlog is bounded by count
// and by age, what falls out is failed with the reason; recover queues failed
// deliveries again with their envelope ids; delete cancels the backlog.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Logger, runOnce } from 'graphile-worker';
import pino from 'pino';
import { buildTaskList } from '../../src/tasks.ts';
import { enforcePausedBacklog, overCountMessage, tooOldMessage } from '../../src/webhooks/backlog.ts';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { signedIn } from '../dashboard/session.ts';
import { startReceiver, type Receiver, verifyFy, eventually } from './receiver.ts';

// One delivery in flight at a time, so arrival order is claim order; short
// retries so a delivery fails (7 attempts) in well under a second.
const config = testConfig({
  allowedPrivateTargets: ['127.0.0.1'],
  webhookRetryDelays: [0.05, 0.05, 0.05, 0.05, 0.05, 0.05],
  webhookTimeoutMs: 1_000,
  webhookConcurrency: 1,
  signInRateLimitPerMinute: 1000,
});

describe('webhook pause and recover', () => {
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

  const receiver = async (...args: Parameters<typeof startReceiver>) => {
    const r = await startReceiver(...args);
    receivers.push(r);
    return r;
  };
  const api = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1${url}`, headers: { 'x-api-key': key }, payload: payload as object });
  const quiet = new Logger(() => () => {});
  const processEvents = (c = config) =>
    runOnce({ pgPool: t.database.pool, taskList: buildTaskList({ db: t.database.db, config: c }), logger: quiet });
  async function setup(url: string, body: object = {}) {
    const team = await makeTeam(t.database.db);
    const res = await api(team.key, 'POST', '/webhooks', { url, events: ['email.contact.saved'], ...body });
    assert.equal(res.statusCode, 201, res.body);
    return { ...team, webhook: res.json().webhook as { id: string; secret: string; pending_count: number } };
  }
  /** One contact.saved event per address, each fanned out in its own job (distinct created_at). */
  async function saveContacts(key: string, emails: string[]) {
    for (const email of emails) {
      const res = await api(key, 'POST', '/email/contacts/upsert', { email });
      assert.equal(res.statusCode, 200, res.body);
      await processEvents();
    }
  }
  const getHook = async (key: string, id: string) => (await api(key, 'GET', `/webhooks/${id}`)).json().webhook;
  const statuses = async (webhookId: string) =>
    (
      await t.database.pool.query(
        `SELECT d.id, d.status, d.last_error, e.payload->>'email' AS email, d.next_attempt_at
           FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
          WHERE d.webhook_id = $1 ORDER BY d.created_at, d.id`,
        [webhookId],
      )
    ).rows;

  test('events while disabled wait, then go out oldest first after the enable, signed with the new secret', async () => {
    const r = await receiver();
    const { key, webhook } = await setup(r.url);
    const disabled = await api(key, 'POST', `/webhooks/${webhook.id}/disable`);
    assert.equal(disabled.statusCode, 200);
    assert.equal(disabled.json().webhook.pending_count, 0);
    const emails = Array.from({ length: 6 }, (_, i) => `paused${i}@example.com`);
    await saveContacts(key, emails);
    await sleep(500);
    assert.equal(r.received.length, 0, 'nothing is sent while disabled');
    const rows = await statuses(webhook.id);
    assert.deepEqual(rows.map((x) => x.email), emails, 'one delivery per event, kept');
    assert.ok(rows.every((x) => x.status === 'pending' && x.next_attempt_at === null), 'parked as pending');
    assert.equal((await getHook(key, webhook.id)).pending_count, 6);
    const listed = (await api(key, 'GET', '/webhooks')).json().webhooks;
    assert.equal(listed.find((w: { id: string }) => w.id === webhook.id).pending_count, 6);

    const enabled = await api(key, 'POST', `/webhooks/${webhook.id}/enable`);
    assert.equal(enabled.statusCode, 200);
    const secret = enabled.json().webhook.secret as string;
    assert.notEqual(secret, webhook.secret);
    assert.equal(enabled.json().webhook.pending_count, 6, 'the backlog is pending at the enable');
    const got = await r.waitFor(6);
    assert.deepEqual(got.map((x) => x.body.payload.email), emails, 'oldest first');
    assert.deepEqual(got.map((x) => x.body.id), rows.map((x) => x.id), 'each with its envelope id');
    assert.ok(got.every((x) => verifyFy(x, secret)), 'signed with the new secret');
    assert.ok(got.every((x) => !verifyFy(x, webhook.secret)), 'not with the old one');
    await eventually(async () => assert.equal((await getHook(key, webhook.id)).pending_count, 0));
    assert.ok((await statuses(webhook.id)).every((x) => x.status === 'success'));
    await sleep(200);
    assert.equal(r.received.length, 6, 'each sent once');
  });

  test('a webhook created disabled collects its backlog; the dashboard shows pending_count', async () => {
    const r = await receiver();
    const { session, key } = await signedIn(t.app, t.database.db);
    const created = await api(key, 'POST', '/webhooks', { url: r.url, events: ['email.contact.saved'], is_enabled: false });
    assert.equal(created.statusCode, 201);
    const id = created.json().webhook.id as string;
    assert.equal(created.json().webhook.pending_count, 0);
    await saveContacts(key, ['d1@example.com', 'd2@example.com', 'd3@example.com']);
    const list = await session.get('/webhooks');
    assert.match(list.body, /<td class="pending-count">3 <small>\(waiting for enable\)<\/small><\/td>/);
    const page = await session.get(`/webhooks/${id}`);
    assert.match(page.body, /<dd id="pending-count">3 deliveries, sent oldest first when the webhook is enabled<\/dd>/);
    await sleep(300);
    assert.equal(r.received.length, 0);
    assert.equal((await api(key, 'PATCH', `/webhooks/${id}`, { is_enabled: true })).statusCode, 200);
    const got = await r.waitFor(3);
    assert.deepEqual(got.map((x) => x.body.payload.email), ['d1@example.com', 'd2@example.com', 'd3@example.com']);
  });

  test('the backlog bound (cron task) fails the overflow beyond the newest N with the reason and keeps the rest', async () => {
    const r = await receiver();
    const { key, webhook } = await setup(r.url, { is_enabled: false });
    const emails = Array.from({ length: 5 }, (_, i) => `over${i}@example.com`);
    await saveContacts(key, emails);
    // The bound runs as the graphile-worker task its cron line schedules.
    await t.database.pool.query(`SELECT graphile_worker.add_job('webhook_paused_backlog')`);
    await processEvents({ ...config, webhookPausedBacklogMax: 3 });
    const rows = await statuses(webhook.id);
    assert.deepEqual(rows.map((x) => x.status), ['failed', 'failed', 'pending', 'pending', 'pending']);
    assert.equal(rows[0].last_error, 'dropped from the paused backlog: more than 3 pending deliveries');
    assert.equal(overCountMessage(100_000), 'dropped from the paused backlog: more than 100,000 pending deliveries');
    assert.equal((await getHook(key, webhook.id)).pending_count, 3);
    const failed = (await api(key, 'GET', `/webhooks/${webhook.id}/deliveries?status=failed`)).json().deliveries;
    assert.equal(failed.length, 2);
    assert.match(failed[0].last_error, /paused backlog/);
    await api(key, 'POST', `/webhooks/${webhook.id}/enable`);
    const got = await r.waitFor(3);
    assert.deepEqual(got.map((x) => x.body.payload.email), emails.slice(2), 'the newest three, oldest first');
    await sleep(300);
    assert.equal(r.received.length, 3);
  });

  test('the backlog bound by age fails old parked deliveries only, and only of disabled webhooks', async () => {
    const r = await receiver((_q, res) => {
      res.writeHead(500);
      res.end();
    });
    const paused = await setup(r.url, { is_enabled: false });
    await saveContacts(paused.key, ['age0@example.com', 'age1@example.com', 'age2@example.com']);
    const live = await setup(`${r.url}/live`);
    await t.database.pool.query(`UPDATE webhooks SET events = '{email.sent}' WHERE id = $1`, [live.webhook.id]); // no traffic of its own
    const [first] = await statuses(paused.webhook.id);
    await t.database.pool.query(`UPDATE webhook_deliveries SET created_at = now() - interval '8 days' WHERE id = $1`, [first.id]);
    // A pending retry of an enabled webhook, as old: not part of any paused backlog.
    await t.database.pool.query(
      `INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, next_attempt_at, created_at)
       VALUES (plover_uuid_v7(), $1, $2, 'email.sent', '{}'::json, now() + interval '1 hour', now() - interval '8 days')`,
      [live.teamId, live.webhook.id],
    );
    const drops = await enforcePausedBacklog(t.database.db, { maxAgeDays: 7, maxCount: 100_000 });
    assert.ok(drops.tooOld >= 1 && drops.overCount === 0, JSON.stringify(drops));
    const rows = await statuses(paused.webhook.id);
    assert.deepEqual(rows.map((x) => x.status), ['failed', 'pending', 'pending']);
    assert.equal(rows[0].last_error, 'dropped from the paused backlog: older than 7 days');
    assert.equal(rows[0].last_error, tooOldMessage(7));
    const { rows: liveRows } = await t.database.pool.query(`SELECT status FROM webhook_deliveries WHERE webhook_id = $1`, [live.webhook.id]);
    assert.deepEqual(liveRows.map((x) => x.status), ['pending'], 'an enabled webhook keeps its old retry');
    assert.equal((await getHook(paused.key, paused.webhook.id)).pending_count, 2);
  });

  test('recover queues failed deliveries of the window again with their envelope ids', async () => {
    let status = 500;
    const r = await receiver((_q, res) => {
      res.writeHead(status);
      res.end();
    });
    const { key, webhook } = await setup(r.url);
    await saveContacts(key, ['rec0@example.com', 'rec1@example.com', 'rec2@example.com']);
    await eventually(async () => {
      const rows = await statuses(webhook.id);
      assert.ok(rows.length === 3 && rows.every((x) => x.status === 'failed'), JSON.stringify(rows.map((x) => x.status)));
    });
    assert.equal(r.received.length, 21, '7 attempts each');
    const rows = await statuses(webhook.id);
    // The first one is outside the window: created two hours ago.
    await t.database.pool.query(`UPDATE webhook_deliveries SET created_at = now() - interval '2 hours' WHERE id = $1`, [rows[0].id]);
    status = 200;
    const since = new Date(Date.now() - 3_600_000).toISOString();
    const res = await api(key, 'POST', `/webhooks/${webhook.id}/recover`, { since });
    assert.equal(res.statusCode, 202, res.body);
    assert.deepEqual(res.json(), { ok: true, queued: 2 });
    const got = (await r.waitFor(23)).slice(21);
    assert.deepEqual(got.map((x) => x.body.id), [rows[1].id, rows[2].id], 'the same envelope ids, oldest first');
    assert.deepEqual(got.map((x) => x.body.payload.email), ['rec1@example.com', 'rec2@example.com']);
    await eventually(async () => {
      const after = await statuses(webhook.id);
      assert.deepEqual(after.map((x) => x.status), ['failed', 'success', 'success']);
    });
    const d = (await api(key, 'GET', `/webhooks/${webhook.id}/deliveries?status=success`)).json().deliveries[0];
    assert.equal(d.attempts, 8, 'the log keeps every attempt');
    // Nothing failed left in the window: a second recover queues nothing.
    assert.deepEqual((await api(key, 'POST', `/webhooks/${webhook.id}/recover`, { since })).json(), { ok: true, queued: 0 });
    // The older one, with a window that reaches it and an explicit until.
    const wide = await api(key, 'POST', `/webhooks/${webhook.id}/recover`, {
      since: new Date(Date.now() - 3 * 3_600_000).toISOString(),
      until: new Date(Date.now() - 3_600_000).toISOString(),
    });
    assert.deepEqual(wide.json(), { ok: true, queued: 1 });
    const [again] = (await r.waitFor(24)).slice(23);
    assert.equal(again!.body.id, rows[0].id);
  });

  test('recover on a disabled webhook parks the deliveries until the enable', async () => {
    const r = await receiver((_q, res) => {
      res.writeHead(500);
      res.end();
    });
    const { key, webhook } = await setup(r.url);
    await saveContacts(key, ['rp@example.com']);
    await eventually(async () => assert.equal((await statuses(webhook.id))[0]?.status, 'failed'));
    await api(key, 'POST', `/webhooks/${webhook.id}/disable`);
    r.respond((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    const res = await api(key, 'POST', `/webhooks/${webhook.id}/recover`, { since: new Date(Date.now() - 60_000).toISOString() });
    assert.deepEqual(res.json(), { ok: true, queued: 1 });
    assert.equal((await getHook(key, webhook.id)).pending_count, 1);
    await sleep(400);
    assert.equal(r.received.length, 7, 'not sent while disabled');
    await api(key, 'POST', `/webhooks/${webhook.id}/enable`);
    const [, , , , , , , sent] = await r.waitFor(8);
    assert.equal(sent!.body.payload.email, 'rp@example.com');
  });

  test('recover validates its window and answers 404 for another team', async () => {
    const { key, webhook } = await setup('http://127.0.0.1:9/hook');
    const other = await makeTeam(t.database.db);
    const url = `/webhooks/${webhook.id}/recover`;
    const now = Date.now();
    const cases: [unknown, string][] = [
      [{}, 'since'],
      [{ since: 'yesterday' }, 'since'],
      [{ since: '2026-01-01T00:00:00' }, 'since'], // no time zone
      [{ since: new Date(now - 15 * 86_400_000).toISOString() }, 'since'],
      [{ since: new Date(now - 3_600_000).toISOString(), until: new Date(now - 7_200_000).toISOString() }, 'until'],
      [{ since: new Date(now - 3_600_000).toISOString(), extra: 1 }, ''],
    ];
    for (const [body, field] of cases) {
      const res = await api(key, 'POST', url, body);
      assert.equal(res.statusCode, 422, `${JSON.stringify(body)}: ${res.body}`);
      const err = res.json().error;
      assert.equal(err.code, 'VALIDATION_FAILED');
      if (field) assert.ok(err.details.some((d: { field: string }) => d.field === field), res.body);
    }
    const ok = { since: new Date(now - 13 * 86_400_000).toISOString() };
    assert.equal((await api(key, 'POST', url, ok)).statusCode, 202);
    // A leap second is a valid date-time that JavaScript's Date cannot hold (it was a 500).
    const leap = { since: new Date(now - 86_400_000).toISOString().slice(0, 11) + '23:59:60Z' };
    const leapRes = await api(key, 'POST', url, leap);
    assert.equal(leapRes.statusCode, 202, leapRes.body);
    // An `until` after year 9999 once its offset is applied (it was a 500).
    const far = await api(key, 'POST', url, { since: ok.since, until: '9999-12-31T23:59:59-15:59' });
    assert.equal(far.statusCode, 202, far.body);
    const foreign = await api(other.key, 'POST', url, ok);
    assert.equal(foreign.statusCode, 404);
    assert.equal(foreign.json().error.code, 'NOT_FOUND');
    assert.equal((await api(key, 'POST', '/webhooks/0190a0a0-0000-7000-8000-000000000000/recover', ok)).statusCode, 404);
    assert.equal((await api(key, 'POST', '/webhooks/not-a-uuid/recover', ok)).statusCode, 404);
    const text = await t.app.inject({
      method: 'POST', url: `/public/v1${url}`, headers: { 'x-api-key': key, 'content-type': 'text/plain' }, payload: 'since',
    });
    assert.equal(text.statusCode, 415);
  });

  test('deleting a disabled webhook cancels its backlog', async () => {
    const r = await receiver();
    const { key, webhook } = await setup(r.url, { is_enabled: false });
    await saveContacts(key, ['del0@example.com', 'del1@example.com']);
    assert.equal((await getHook(key, webhook.id)).pending_count, 2);
    assert.equal((await api(key, 'DELETE', `/webhooks/${webhook.id}`)).statusCode, 200);
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1', [webhook.id]);
    assert.equal(rows[0].n, 0);
    await saveContacts(key, ['del2@example.com']);
    await sleep(300);
    assert.equal(r.received.length, 0);
    assert.equal((await api(key, 'POST', `/webhooks/${webhook.id}/enable`)).statusCode, 404);
  });
});
