// Webhook pages through app.inject: the API's rules (target safety, events,
// limit of 10 enabled), locked webhooks (no edit/delete, forged ones refused),
// secret on demand, delivery log with resend, team isolation.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';
import { signedIn } from './session.ts';

let t: TestApp;
let receiver: Receiver;
before(async () => {
  receiver = await startReceiver((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('thanks <b>bold</b>');
  });
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000, allowedPrivateTargets: ['127.0.0.1'] } });
});
after(async () => {
  await t?.close();
  await receiver?.close();
});

const api = (key: string, method: 'GET' | 'POST' | 'PATCH', url: string, payload?: object) =>
  t.app.inject({ method, url: `/public/v1/webhooks${url}`, headers: { 'x-api-key': key }, ...(payload ? { payload } : {}) });

describe('webhook pages', () => {
  test('create through the form with the API rules; show the secret on demand; disable and enable', async () => {
    const { session, key } = await signedIn(t.app, t.database.db);
    await session.get('/webhooks/new');
    const bad = await session.post('/webhooks', { url: 'http://10.1.2.3/hook', events: 'email.sent' });
    assert.equal(bad.statusCode, 422);
    assert.match(bad.body, /URL must use https/);
    const noEvents = await session.post('/webhooks', { url: receiver.url });
    assert.equal(noEvents.statusCode, 422);
    assert.match(noEvents.body, /at least one event/);
    const junk = await session.post('/webhooks', { url: receiver.url, events: 'email.nope' });
    assert.equal(junk.statusCode, 422);

    const body = new URLSearchParams({ _csrf: session.csrf, url: receiver.url, description: 'CRM', is_enabled: 'on' });
    body.append('events', 'email.sent');
    body.append('events', 'email.contact.saved');
    const created = await t.app.inject({
      method: 'POST',
      url: '/webhooks',
      headers: { cookie: [...session.jar].map(([k, v]) => `${k}=${v}`).join('; '), 'content-type': 'application/x-www-form-urlencoded' },
      payload: body.toString(),
    });
    assert.equal(created.statusCode, 303, created.body);
    const path = String(created.headers.location).split('?')[0];
    const id = path.split('/').pop()!;
    const page = await session.get(path);
    assert.match(page.body, /email\.sent, email\.contact\.saved/);
    assert.match(page.body, /Show secret/);
    const apiSecret = (await api(key, 'GET', `/${id}`)).json().webhook.secret as string;
    assert.ok(!page.body.includes(apiSecret), 'secret not in the page until asked');
    const shown = await session.post(`/webhooks/${id}/secret`);
    assert.ok(shown.body.includes(`value="${apiSecret}"`), 'secret shown');

    assert.equal((await session.post(`/webhooks/${id}/disable`)).statusCode, 303);
    assert.equal((await api(key, 'GET', `/${id}`)).json().webhook.is_enabled, false);
    assert.equal((await session.post(`/webhooks/${id}/enable`)).statusCode, 303);
    const after = (await api(key, 'GET', `/${id}`)).json().webhook;
    assert.equal(after.is_enabled, true);
    assert.notEqual(after.secret, apiSecret, 'enabling issues a new secret');

    await session.get(`/webhooks/${id}/edit`);
    const edited = await session.post(`/webhooks/${id}/edit`, { url: `${receiver.url}?v=2`, events: 'email.opened', description: '' });
    assert.equal(edited.statusCode, 303);
    const saved = (await api(key, 'GET', `/${id}`)).json().webhook;
    assert.equal(saved.url, `${receiver.url}?v=2`);
    assert.deepEqual(saved.events, ['email.opened']);
    await session.get(`/webhooks/${id}/delete`);
    assert.equal((await session.post(`/webhooks/${id}/delete`)).headers.location, '/webhooks?done=deleted');
    assert.equal((await api(key, 'GET', `/${id}`)).statusCode, 404);
  });

  test('the limit of 10 enabled holds in the dashboard; a disabled one can still be created', async () => {
    const { session, key } = await signedIn(t.app, t.database.db);
    for (let i = 0; i < 10; i++) assert.equal((await api(key, 'POST', '', { url: receiver.url, events: ['email.sent'] })).statusCode, 201);
    await session.get('/webhooks/new');
    const over = await session.post('/webhooks', { url: receiver.url, events: 'email.sent', is_enabled: 'on' });
    assert.equal(over.statusCode, 422);
    assert.match(over.body, /at most 10 enabled/);
    const disabled = await session.post('/webhooks', { url: receiver.url, events: 'email.sent' });
    assert.equal(disabled.statusCode, 303);
    const id = String(disabled.headers.location).split('?')[0].split('/').pop()!;
    const enable = await session.post(`/webhooks/${id}/enable`);
    assert.equal(enable.statusCode, 422);
  });

  test('a locked webhook shows its owner, offers no edit or delete, and forged ones are refused', async () => {
    const { session, key } = await signedIn(t.app, t.database.db);
    const hook = (await api(key, 'POST', '', { url: receiver.url, events: ['email.sent'], source: 'zapier' })).json().webhook;
    const page = await session.get(`/webhooks/${hook.id}`);
    assert.match(page.body, /managed by <strong>zapier<\/strong>/);
    assert.doesNotMatch(page.body, new RegExp(`/webhooks/${hook.id}/(edit|delete)`));
    assert.equal((await session.get(`/webhooks/${hook.id}/edit`)).statusCode, 403);
    assert.equal((await session.get(`/webhooks/${hook.id}/delete`)).statusCode, 403);
    await session.get('/webhooks');
    const forged = await session.post(`/webhooks/${hook.id}/edit`, { url: 'https://example.com/stolen', events: 'email.sent' });
    assert.equal(forged.statusCode, 403);
    assert.equal((await session.post(`/webhooks/${hook.id}/delete`)).statusCode, 403);
    const still = (await api(key, 'GET', `/${hook.id}`)).json().webhook;
    assert.equal(still.url, receiver.url);
    assert.equal(still.source, 'zapier');
  });

  test('delivery log with attempts, payload and response; resend queues the same envelope', async () => {
    const { session, key, teamId } = await signedIn(t.app, t.database.db);
    const hook = (await api(key, 'POST', '', { url: receiver.url, events: ['email.sent'] })).json().webhook;
    const sim = await api(key, 'POST', '/simulate', { webhook_id: hook.id, event: 'email.sent' });
    assert.equal(sim.statusCode, 200, sim.body);
    const deliveryId = sim.json().delivery.id;
    const page = await session.get(`/webhooks/${hook.id}`);
    assert.match(page.body, new RegExp(deliveryId));
    assert.match(page.body, /HTTP 200/);
    assert.match(page.body, /status-simulated[^>]*>simulated</, 'a simulated delivery is marked');
    assert.match(page.body, /thanks &lt;b&gt;bold&lt;\/b&gt;/);
    assert.match(page.body, /&#34;event&#34;: &#34;email.sent&#34;/);
    assert.match((await session.get(`/webhooks/${hook.id}?status=failed`)).body, /No deliveries with status failed/);
    const resent = await session.post(`/webhooks/${hook.id}/deliveries/${deliveryId}/resend`);
    assert.equal(resent.headers.location, `/webhooks/${hook.id}?done=resent`);
    const row = await t.database.db.selectFrom('webhook_deliveries').select(['status', 'team_id']).where('id', '=', deliveryId).executeTakeFirstOrThrow();
    assert.equal(row.status, 'pending');
    assert.equal(row.team_id, teamId);
  });

  test("another team's webhook and deliveries are 404 for every page and action", async () => {
    const a = await signedIn(t.app, t.database.db);
    const b = await signedIn(t.app, t.database.db);
    const hook = (await api(b.key, 'POST', '', { url: receiver.url, events: ['email.sent'] })).json().webhook;
    const sim = (await api(b.key, 'POST', '/simulate', { webhook_id: hook.id, event: 'email.sent' })).json();
    for (const url of [`/webhooks/${hook.id}`, `/webhooks/${hook.id}/edit`, `/webhooks/${hook.id}/delete`, '/webhooks/nope']) {
      assert.equal((await a.session.get(url)).statusCode, 404, url);
    }
    await a.session.get('/webhooks');
    for (const url of [`/webhooks/${hook.id}/edit`, `/webhooks/${hook.id}/delete`, `/webhooks/${hook.id}/disable`, `/webhooks/${hook.id}/secret`, `/webhooks/${hook.id}/deliveries/${sim.delivery.id}/resend`]) {
      assert.equal((await a.session.post(url, { url: receiver.url, events: 'email.sent' })).statusCode, 404, url);
    }
    const list = await a.session.get('/webhooks');
    assert.doesNotMatch(list.body, new RegExp(hook.id));
    assert.equal((await api(b.key, 'GET', `/${hook.id}`)).json().webhook.is_enabled, true);
  });
});
