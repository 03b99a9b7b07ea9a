import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

const PUBLIC_URL = 'https://93.184.215.14/hooks/plover';

describe('webhook management', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const call = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1/webhooks${url}`, headers: { 'x-api-key': key }, payload: payload as object });

  test('create returns the webhook with a new random secret, stored encrypted', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const res = await call(key, 'POST', '', { url: PUBLIC_URL, events: ['email.contact.saved', 'email.sent', 'email.sent'] });
    assert.equal(res.statusCode, 201, res.body);
    const { ok, webhook } = res.json();
    assert.equal(ok, true);
    assert.deepEqual(Object.keys(webhook).sort(), [
      'created_at', 'description', 'events', 'id', 'is_enabled', 'last_success_at', 'locked', 'pending_count', 'secret', 'source', 'updated_at', 'url',
    ]);
    assert.equal(webhook.url, PUBLIC_URL);
    assert.deepEqual(webhook.events, ['email.contact.saved', 'email.sent']);
    assert.equal(webhook.is_enabled, true);
    assert.equal(webhook.source, null);
    assert.equal(webhook.locked, false);
    assert.equal(webhook.last_success_at, null);
    assert.match(webhook.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.equal(Buffer.from(webhook.secret.slice(6), 'base64').length, 32);
    const other = (await call(key, 'POST', '', { url: PUBLIC_URL, events: ['email.sent'] })).json().webhook;
    assert.notEqual(other.secret, webhook.secret);
    const { rows } = await t.database.pool.query('SELECT secret_enc FROM webhooks WHERE id = $1 AND team_id = $2', [webhook.id, teamId]);
    assert.equal(rows[0].secret_enc.includes(Buffer.from(webhook.secret)), false, 'the secret is not stored in clear');
    assert.equal(rows[0].secret_enc.includes(Buffer.from(webhook.secret.slice(6), 'base64')), false);
  });

  test('get shows the secret, the list does not; the list is newest first with meta', async () => {
    const { key } = await makeTeam(t.database.db);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await call(key, 'POST', '', { url: `${PUBLIC_URL}/${i}`, events: ['email.opened'] })).json().webhook.id);
    const got = await call(key, 'GET', `/${ids[0]}`);
    assert.equal(got.statusCode, 200);
    assert.match(got.json().webhook.secret, /^whsec_/);
    const list = await call(key, 'GET', '?per_page=2&page=1');
    assert.equal(list.statusCode, 200);
    const body = list.json();
    assert.deepEqual(body.webhooks.map((w: { id: string }) => w.id), [ids[2], ids[1]]);
    assert.equal(body.webhooks[0].secret, undefined);
    assert.deepEqual(body.meta, { current_page: '1', per_page: 2, total: '3', last_page: '2' });
    assert.equal((await call(key, 'GET', '?per_page=101')).statusCode, 422);
  });

  test('update changes the given fields; only a disabled -> enabled transition changes the secret', async () => {
    const { key } = await makeTeam(t.database.db);
    const created = (await call(key, 'POST', '', { url: PUBLIC_URL, events: ['email.sent'] })).json().webhook;
    const patched = await call(key, 'PATCH', `/${created.id}`, {
      url: `${PUBLIC_URL}/v2`,
      events: ['email.clicked'],
      description: 'CRM sync',
      is_enabled: true,
    });
    assert.equal(patched.statusCode, 200, patched.body);
    const w = patched.json().webhook;
    assert.equal(w.url, `${PUBLIC_URL}/v2`);
    assert.deepEqual(w.events, ['email.clicked']);
    assert.equal(w.description, 'CRM sync');
    assert.equal(w.secret, created.secret, 'is_enabled: true on an enabled webhook changes nothing');

    const disabled = (await call(key, 'POST', `/${created.id}/disable`)).json().webhook;
    assert.equal(disabled.is_enabled, false);
    assert.equal(disabled.secret, created.secret);
    const enabled = (await call(key, 'POST', `/${created.id}/enable`)).json().webhook;
    assert.equal(enabled.is_enabled, true);
    assert.notEqual(enabled.secret, created.secret, 'enable issues a new secret');
    assert.equal((await call(key, 'POST', `/${created.id}/enable`)).json().webhook.secret, enabled.secret, 'enabling an enabled one: same secret');

    await call(key, 'PATCH', `/${created.id}`, { is_enabled: false });
    const viaPatch = (await call(key, 'PATCH', `/${created.id}`, { is_enabled: true })).json().webhook;
    assert.equal(viaPatch.is_enabled, true);
    assert.notEqual(viaPatch.secret, enabled.secret, 'is_enabled: true on a disabled webhook is an enable');
  });

  test('source locks and unlocks', async () => {
    const { key } = await makeTeam(t.database.db);
    const w = (await call(key, 'POST', '', { url: PUBLIC_URL, events: ['email.sent'], source: 'zapier' })).json().webhook;
    assert.equal(w.source, 'zapier');
    assert.equal(w.locked, true);
    const unlocked = (await call(key, 'PATCH', `/${w.id}`, { source: null })).json().webhook;
    assert.equal(unlocked.source, null);
    assert.equal(unlocked.locked, false);
    const relocked = (await call(key, 'PATCH', `/${w.id}`, { source: 'internal' })).json().webhook;
    assert.equal(relocked.locked, true);
    const bad = await call(key, 'PATCH', `/${w.id}`, { source: 'ifttt' });
    assert.equal(bad.statusCode, 422);
    assert.equal(bad.json().error.details[0].field, 'source');
  });

  test('events must come from the catalog; bodies are validated', async () => {
    const { key } = await makeTeam(t.database.db);
    const cases: [unknown, string][] = [
      [{ url: PUBLIC_URL, events: ['email.sent', 'contact.saved'] }, 'events[1]'],
      [{ url: PUBLIC_URL, events: [] }, 'events'],
      [{ url: PUBLIC_URL }, 'events'],
      [{ events: ['email.sent'] }, 'url'],
      [{ url: PUBLIC_URL, events: 'email.sent' }, 'events'],
      [{ url: PUBLIC_URL, events: ['email.sent'], is_enabled: 'yes' }, 'is_enabled'],
      [{ url: PUBLIC_URL, events: ['email.sent'], secret: 'mine' }, 'secret'],
      [{ url: 42, events: ['email.sent'] }, 'url'],
    ];
    for (const [payload, field] of cases) {
      const res = await call(key, 'POST', '', payload);
      assert.equal(res.statusCode, 422, JSON.stringify(payload));
      const err = res.json().error;
      assert.equal(err.code, 'VALIDATION_FAILED');
      assert.ok(err.details.some((d: { field: string }) => d.field === field), `${JSON.stringify(payload)} → ${JSON.stringify(err.details)}`);
    }
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM webhooks w JOIN api_keys k ON k.team_id = w.team_id WHERE k.prefix = $1', [key.slice(0, 15)]);
    assert.equal(rows[0].n, 0, 'nothing was written');
  });

  test('at most 10 enabled webhooks per team, also under 20 parallel creates', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => call(key, 'POST', '', { url: `${PUBLIC_URL}/${i}`, events: ['email.sent'] })),
    );
    const codes = results.map((r) => r.statusCode);
    assert.equal(codes.filter((c) => c === 201).length, 10, codes.join(','));
    const refused = results.filter((r) => r.statusCode === 422);
    assert.equal(refused.length, 10);
    for (const r of refused) assert.equal(r.json().error.code, 'MAX_WEBHOOKS_EXCEEDED');
    const count = async () =>
      (await t.database.pool.query('SELECT count(*)::int AS n FROM webhooks WHERE team_id = $1 AND is_enabled', [teamId])).rows[0].n;
    assert.equal(await count(), 10);

    const disabled = await call(key, 'POST', '', { url: PUBLIC_URL, events: ['email.sent'], is_enabled: false });
    assert.equal(disabled.statusCode, 201, 'a disabled webhook can always be created');
    const id = disabled.json().webhook.id;
    const enable = await call(key, 'POST', `/${id}/enable`);
    assert.equal(enable.statusCode, 422);
    assert.equal(enable.json().error.code, 'MAX_WEBHOOKS_EXCEEDED');
    assert.equal((await call(key, 'PATCH', `/${id}`, { is_enabled: true })).json().error.code, 'MAX_WEBHOOKS_EXCEEDED');

    // Parallel enables of disabled webhooks after freeing 2 slots: exactly 2 win.
    const enabledIds = results.filter((r) => r.statusCode === 201).map((r) => r.json().webhook.id);
    await call(key, 'POST', `/${enabledIds[0]}/disable`);
    await call(key, 'DELETE', `/${enabledIds[1]}`);
    const extra = [id];
    for (let i = 0; i < 5; i++) extra.push((await call(key, 'POST', '', { url: PUBLIC_URL, events: ['email.sent'], is_enabled: false })).json().webhook.id);
    const enables = await Promise.all(extra.map((x) => call(key, 'POST', `/${x}/enable`)));
    assert.equal(enables.filter((r) => r.statusCode === 200).length, 2);
    assert.equal(await count(), 10);
  });

  test('delete removes the webhook; unknown and malformed ids are 404', async () => {
    const { key } = await makeTeam(t.database.db);
    const w = (await call(key, 'POST', '', { url: PUBLIC_URL, events: ['email.sent'] })).json().webhook;
    const del = await call(key, 'DELETE', `/${w.id}`);
    assert.equal(del.statusCode, 200);
    assert.deepEqual(del.json(), { ok: true });
    for (const [method, path] of [
      ['GET', `/${w.id}`],
      ['DELETE', `/${w.id}`],
      ['PATCH', `/${w.id}`],
      ['GET', '/not-a-uuid'],
      ['POST', '/123/enable'],
      ['GET', `/${w.id}/deliveries`],
    ] as const) {
      const res = await call(key, method, path, method === 'PATCH' ? { description: 'x' } : undefined);
      assert.equal(res.statusCode, 404, `${method} ${path}`);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
  });

  test("another team's webhook is 404 on every {id} route and absent from its list", async () => {
    const a = await makeTeam(t.database.db);
    const b = await makeTeam(t.database.db);
    const w = (await call(a.key, 'POST', '', { url: PUBLIC_URL, events: ['email.sent'] })).json().webhook;
    await t.database.pool.query(
      `INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, status) VALUES (gen_random_uuid(), $1, $2, 'email.sent', '{}', 'failed')`,
      [a.teamId, w.id],
    );
    const { rows } = await t.database.pool.query('SELECT id FROM webhook_deliveries WHERE webhook_id = $1', [w.id]);
    const deliveryId = rows[0].id;
    for (const [method, path, payload] of [
      ['GET', `/${w.id}`],
      ['PATCH', `/${w.id}`, { description: 'mine now' }],
      ['DELETE', `/${w.id}`],
      ['POST', `/${w.id}/enable`],
      ['POST', `/${w.id}/disable`],
      ['GET', `/${w.id}/deliveries`],
      ['POST', `/${w.id}/deliveries/${deliveryId}/resend`],
      ['POST', '/simulate', { webhook_id: w.id, event: 'email.sent' }],
    ] as const) {
      const res = await call(b.key, method, path, payload);
      assert.equal(res.statusCode, 404, `${method} ${path}: ${res.body}`);
    }
    assert.equal((await call(b.key, 'GET', '')).json().webhooks.length, 0);
    const still = (await call(a.key, 'GET', `/${w.id}`)).json().webhook;
    assert.equal(still.description, null);
    assert.equal(still.is_enabled, true);
    const d = await t.database.pool.query('SELECT status FROM webhook_deliveries WHERE id = $1', [deliveryId]);
    assert.equal(d.rows[0].status, 'failed', 'the resend by another team changed nothing');
  });

  test('simulate without webhook_id returns a sample envelope for every catalog event', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const events = [
      'email.sent', 'email.delivered', 'email.deferred', 'email.bounced.soft', 'email.bounced.hard', 'email.opened', 'email.clicked',
      'email.replied', 'email.bot.opened', 'email.bot.clicked', 'email.contact.saved', 'email.contact.unsubscribed', 'email.lead.created',
      'email.sale.created',
    ];
    for (const event of events) {
      const res = await call(key, 'POST', '/simulate', { event });
      assert.equal(res.statusCode, 200, res.body);
      const { payload } = res.json();
      assert.deepEqual(Object.keys(payload), ['id', 'event', 'team_id', 'timestamp', 'payload']);
      assert.equal(payload.event, event);
      assert.equal(payload.team_id, teamId);
      assert.match(payload.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.equal(typeof payload.payload, 'object');
      if (event !== 'email.lead.created' && event !== 'email.sale.created') assert.equal(typeof payload.payload.email, 'string');
    }
    const bot = (await call(key, 'POST', '/simulate', { event: 'email.bot.clicked' })).json().payload.payload;
    assert.deepEqual(Object.keys(bot.decision).sort(), ['bot_score', 'is_bot', 'reasons']);
    const sale = (await call(key, 'POST', '/simulate', { event: 'email.sale.created' })).json().payload.payload;
    assert.equal(typeof sale.amount, 'number');
    assert.equal((await call(key, 'POST', '/simulate', { event: 'contact.saved' })).statusCode, 422);
  });
});
