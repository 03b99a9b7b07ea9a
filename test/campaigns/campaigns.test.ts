// Campaigns, happy paths: create (defaults, both event spellings), get, list
// (search, paging, meta), start/stop transitions.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { ISO_MS, client, countRows, insertMailAccount, insertTemplate, makeFixture, validBody } from './fixtures.ts';

describe('campaigns', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  test('create: both event spellings are stored dotted and de-duplicated; every default is filled', async () => {
    const f = await makeFixture(t);
    const template2 = await insertTemplate(t.database.db, f.teamId);
    const api = client(t, f.key);
    const res = await api.post('/', {
      name: '  Welcome series  ',
      template_ids: [f.templateId, template2],
      mail_account_ids: [f.accountId],
      events: ['contact_saved', 'lead.created', 'contact.saved', 'sale_created', 'lead_created'],
    });
    assert.equal(res.statusCode, 201, res.body);
    const body = res.json();
    assert.equal(body.ok, true);
    const c = body.campaign;

    const events = ['contact.saved', 'lead.created', 'sale.created'];
    const expectedSendData = {
      template_ids: [f.templateId, template2],
      mail_account_ids: [f.accountId],
      from_name: '',
      reply_to_name: '',
      reply_to_email: '',
      broadcast_send: { send_amount: 0, scheduled_send_time: null },
      automation_send: {
        send_amount: 0,
        iteration_send_amount: 0,
        min_delivery_rate: 0,
        send_interval: 0,
        scheduled_send_time: null,
        is_incremental_send: false,
        max_iterations: 0,
        max_iteration_send_amount: 0,
      },
      event_triggered_send: { events, contact_cooldown_interval: 3600, contact_daily_email_cap: 3, enabled: true },
      segment_query: { rules: [] },
      open_tracking: true,
      click_tracking: true,
      verification_data: { acceptable_statuses: [], active: false, max_budget: 0, age_threshold: 0 },
      contact_cache_level: 'none',
      user_platform_role: 'api',
    };

    assert.match(c.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(c.team_id, f.teamId);
    assert.equal(c.name, 'Welcome series');
    assert.equal(c.delivery_type, 'event');
    assert.equal(c.campaign_type, 'event_triggered');
    assert.deepEqual(c.meta, []);
    assert.match(c.created_at, ISO_MS);
    assert.match(c.updated_at, ISO_MS);
    assert.deepEqual(c.draft_data, { last_sent_at: null, send_data: expectedSendData });

    assert.equal(c.campaign_sends.length, 1);
    const s = c.campaign_sends[0];
    assert.match(s.id, /^[0-9a-f-]{36}$/);
    assert.notEqual(s.id, c.id);
    assert.equal(s.campaign_id, c.id);
    assert.equal(s.campaign_type, 'event_triggered');
    assert.equal(s.status, 'active');
    assert.equal(s.next_send_at, null);
    assert.deepEqual(s.next_send_countdown, { total: 0, remaining: 0 });
    assert.deepEqual(s.send_data, expectedSendData);
    assert.deepEqual(s.send_progress, { total_sent: 0, total_bounced: 0, delivery_rate: 0, current_iteration: 0, reason: '' });
    assert.match(s.created_at, ISO_MS);
    assert.match(s.updated_at, ISO_MS);
    // Same transaction: the send is created at the campaign's instant.
    assert.equal(s.created_at, c.created_at);

    // What is stored is what was answered.
    const row = await t.database.db.selectFrom('campaigns').selectAll().where('id', '=', c.id).executeTakeFirstOrThrow();
    assert.deepEqual(row.trigger_events, events);
    assert.deepEqual(row.draft_data, c.draft_data);
    assert.equal(row.created_at.toISOString(), c.created_at);
    const sends = await t.database.db.selectFrom('campaign_sends').selectAll().where('campaign_id', '=', c.id).execute();
    assert.equal(sends.length, 1);
    assert.equal(sends[0].team_id, f.teamId);
    assert.equal(sends[0].status, 'active');
    assert.deepEqual(sends[0].send_data, expectedSendData);
  });

  test('create: the extensions are stored as given', async () => {
    const f = await makeFixture(t);
    const account2 = await insertMailAccount(t.database.db, f.teamId);
    const rules = [{ field: 'tags', op: 'contains', value: 'vip' }, { any: [{ field: 'country_code', op: 'eq', value: 'DE' }] }];
    const res = await client(t, f.key).post(
      '/',
      validBody(f, {
        template_ids: [`urn:uuid:${f.templateId}`],
        mail_account_ids: [account2, f.accountId.toUpperCase()],
        events: ['sale.created'],
        from_name: 'Plover News',
        reply_to_name: 'Support',
        reply_to_email: 'Help@Example.com',
        open_tracking: false,
        click_tracking: false,
        event_triggered_send: { enabled: false, contact_cooldown_interval: 0, contact_daily_email_cap: 1000 },
        segment_query: { rules },
      }),
    );
    assert.equal(res.statusCode, 201, res.body);
    const sd = res.json().campaign.draft_data.send_data;
    assert.deepEqual(sd.template_ids, [f.templateId], 'urn:uuid: form is stored canonically');
    assert.deepEqual(sd.mail_account_ids, [account2, f.accountId], 'ids are stored in canonical lower case');
    assert.equal(sd.from_name, 'Plover News');
    assert.equal(sd.reply_to_name, 'Support');
    assert.equal(sd.reply_to_email, 'help@example.com');
    assert.equal(sd.open_tracking, false);
    assert.equal(sd.click_tracking, false);
    assert.deepEqual(sd.event_triggered_send, {
      events: ['sale.created'],
      contact_cooldown_interval: 0,
      contact_daily_email_cap: 1000,
      enabled: false,
    });
    assert.deepEqual(sd.segment_query, { rules });
    assert.deepEqual(res.json().campaign.campaign_sends[0].send_data, sd);
  });

  test('create: partial event_triggered_send keeps the other defaults', async () => {
    const f = await makeFixture(t);
    const res = await client(t, f.key).post('/', validBody(f, { event_triggered_send: { contact_daily_email_cap: 7 } }));
    assert.equal(res.statusCode, 201, res.body);
    assert.deepEqual(res.json().campaign.draft_data.send_data.event_triggered_send, {
      events: ['contact.saved'],
      contact_cooldown_interval: 3600,
      contact_daily_email_cap: 7,
      enabled: true,
    });
  });

  test('get: the campaign as created, with its sends', async () => {
    const f = await makeFixture(t);
    const api = client(t, f.key);
    const created = (await api.post('/', validBody(f))).json().campaign;
    const res = await api.get(`/${created.id}`);
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { ok: true, campaign: created });
    // Upper-case ids name the same campaign.
    const upper = await api.get(`/${created.id.toUpperCase()}`);
    assert.equal(upper.statusCode, 200);
    assert.equal(upper.json().campaign.id, created.id);
  });

  test('list: newest first, search, paging and meta', async () => {
    const f = await makeFixture(t);
    const api = client(t, f.key);
    const names = ['Spring sale', 'spring_launch', 'Autumn 100% off', 'Back\\slash', 'Winter'];
    const ids: string[] = [];
    for (const name of names) {
      const res = await api.post('/', validBody(f, { name }));
      assert.equal(res.statusCode, 201, res.body);
      ids.push(res.json().campaign.id);
    }
    const newestFirst = [...ids].reverse();

    const all = await api.get('/');
    assert.equal(all.statusCode, 200);
    const body = all.json();
    assert.equal(body.ok, true);
    assert.deepEqual(body.meta, { current_page: '1', per_page: 15, total: '5', last_page: '1' });
    assert.deepEqual(body.campaigns.map((c: { id: string }) => c.id), newestFirst);
    for (const c of body.campaigns) {
      assert.equal(c.team_id, f.teamId);
      assert.equal(c.campaign_sends.length, 1);
      assert.equal(c.campaign_sends[0].campaign_id, c.id);
      assert.equal(c.draft_data.send_data.template_ids[0], f.templateId);
    }
    // The list renders a campaign exactly as get does.
    assert.deepEqual(body.campaigns[0], (await api.get(`/${ids[4]}`)).json().campaign);

    const search = async (q: string) =>
      (await api.get(`/?search=${encodeURIComponent(q)}`)).json().campaigns.map((c: { name: string }) => c.name);
    assert.deepEqual(await search('SPRING'), ['spring_launch', 'Spring sale']);
    assert.deepEqual(await search('%'), ['Autumn 100% off'], '% matches literally');
    assert.deepEqual(await search('_'), ['spring_launch'], '_ matches literally');
    assert.deepEqual(await search('\\'), ['Back\\slash'], 'backslash matches literally');
    assert.deepEqual(await search('nothing like it'), []);
    assert.deepEqual(await search(''), [...names].reverse(), 'an empty search filters nothing');
    const searched = (await api.get('/?search=spring&per_page=1')).json();
    assert.deepEqual(searched.meta, { current_page: '1', per_page: 1, total: '2', last_page: '2' });

    const p1 = (await api.get('/?per_page=2')).json();
    const p2 = (await api.get('/?per_page=2&page=2')).json();
    const p3 = (await api.get('/?per_page=2&page=3')).json();
    assert.deepEqual(p1.meta, { current_page: '1', per_page: 2, total: '5', last_page: '3' });
    assert.deepEqual(p2.meta, { current_page: '2', per_page: 2, total: '5', last_page: '3' });
    assert.deepEqual(p3.meta, { current_page: '3', per_page: 2, total: '5', last_page: '3' });
    assert.deepEqual(
      [...p1.campaigns, ...p2.campaigns, ...p3.campaigns].map((c: { id: string }) => c.id),
      newestFirst,
    );
    const beyond = (await api.get('/?per_page=2&page=9')).json();
    assert.deepEqual(beyond.campaigns, []);
    assert.deepEqual(beyond.meta, { current_page: '9', per_page: 2, total: '5', last_page: '3' });
    const max = (await api.get('/?per_page=100')).json();
    assert.equal(max.meta.per_page, 100);
    assert.equal(max.campaigns.length, 5);
  });

  test('list: an empty team', async () => {
    const f = await makeFixture(t);
    const res = await client(t, f.key).get('/');
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { ok: true, campaigns: [], meta: { current_page: '1', per_page: 15, total: '0', last_page: '1' } });
  });

  test('start/stop: active -> paused -> active; repeats are no-ops; updated_at moves only on a change', async () => {
    const f = await makeFixture(t);
    const api = client(t, f.key);
    const created = (await api.post('/', validBody(f))).json().campaign;
    const sendUpdated = async () =>
      (await t.database.db.selectFrom('campaign_sends').select('updated_at').where('campaign_id', '=', created.id).executeTakeFirstOrThrow())
        .updated_at.toISOString();

    const startNoop = await api.post(`/${created.id}/start`);
    assert.equal(startNoop.statusCode, 200, startNoop.body);
    assert.equal(startNoop.json().campaign.campaign_sends[0].status, 'active');
    assert.equal(startNoop.json().campaign.campaign_sends[0].updated_at, created.campaign_sends[0].updated_at, 'no-op leaves updated_at');
    assert.equal(startNoop.json().campaign.updated_at, created.updated_at);

    // Back-date both rows so "moved" cannot be hidden by two requests in one millisecond.
    const past = new Date(Date.now() - 60_000).toISOString();
    await t.database.db.updateTable('campaign_sends').set({ updated_at: past }).where('campaign_id', '=', created.id).execute();
    await t.database.db.updateTable('campaigns').set({ updated_at: past }).where('id', '=', created.id).execute();

    const stopped = await api.post(`/${created.id}/stop`);
    assert.equal(stopped.statusCode, 200, stopped.body);
    const sc = stopped.json().campaign;
    assert.equal(sc.id, created.id);
    assert.equal(sc.campaign_sends.length, 1);
    assert.equal(sc.campaign_sends[0].status, 'paused');
    assert.ok(sc.campaign_sends[0].updated_at > past, 'send updated_at moved');
    assert.ok(sc.updated_at > past, 'campaign updated_at moved');
    assert.equal(sc.created_at, created.created_at);
    assert.equal(await sendUpdated(), sc.campaign_sends[0].updated_at);
    assert.equal((await api.get(`/${created.id}`)).json().campaign.campaign_sends[0].status, 'paused');

    const stopNoop = await api.post(`/${created.id}/stop`);
    assert.equal(stopNoop.statusCode, 200);
    assert.equal(stopNoop.json().campaign.campaign_sends[0].status, 'paused');
    assert.equal(stopNoop.json().campaign.campaign_sends[0].updated_at, sc.campaign_sends[0].updated_at);

    const started = await api.post(`/${created.id}/start`);
    assert.equal(started.statusCode, 200);
    assert.equal(started.json().campaign.campaign_sends[0].status, 'active');
    assert.deepEqual(started.json().campaign.campaign_sends[0].send_data, created.campaign_sends[0].send_data);
  });

  test('start/stop act on the latest send only; sends are listed newest first', async () => {
    const f = await makeFixture(t);
    const api = client(t, f.key);
    const created = (await api.post('/', validBody(f))).json().campaign;
    const first = created.campaign_sends[0];
    // A later send, as the engine would make one (no API creates a second send yet).
    await sql`INSERT INTO campaign_sends (team_id, campaign_id, campaign_type, status, send_data, created_at)
              VALUES (${f.teamId}, ${created.id}, 'event_triggered', 'paused', ${JSON.stringify(first.send_data)}::jsonb,
                      now() + interval '1 second')`.execute(t.database.db);

    const got = (await api.get(`/${created.id}`)).json().campaign;
    assert.equal(got.campaign_sends.length, 2);
    assert.notEqual(got.campaign_sends[0].id, first.id);
    assert.equal(got.campaign_sends[0].status, 'paused');
    assert.equal(got.campaign_sends[1].id, first.id);
    const listed = (await api.get('/')).json().campaigns[0];
    assert.deepEqual(listed.campaign_sends, got.campaign_sends);

    const started = (await api.post(`/${created.id}/start`)).json().campaign;
    assert.deepEqual(started.campaign_sends.map((s: { status: string }) => s.status), ['active', 'active']);
    const stopped = (await api.post(`/${created.id}/stop`)).json().campaign;
    assert.deepEqual(stopped.campaign_sends.map((s: { status: string }) => s.status), ['paused', 'active'], 'the older send is untouched');
  });

  for (const status of ['completed', 'failed'] as const) {
    test(`start/stop of a ${status} send: 409 CONFLICT, nothing changes`, async () => {
      const f = await makeFixture(t);
      const api = client(t, f.key);
      const created = (await api.post('/', validBody(f))).json().campaign;
      await t.database.db.updateTable('campaign_sends').set({ status }).where('campaign_id', '=', created.id).execute();
      for (const action of ['start', 'stop']) {
        const res = await api.post(`/${created.id}/${action}`);
        assert.equal(res.statusCode, 409, res.body);
        assert.equal(res.json().ok, false);
        assert.equal(res.json().error.code, 'CONFLICT');
        assert.match(res.json().error.message, new RegExp(status));
      }
      const row = await t.database.db.selectFrom('campaign_sends').select(['status', 'updated_at']).where('campaign_id', '=', created.id).executeTakeFirstOrThrow();
      assert.equal(row.status, status);
    });
  }

  test('concurrent stop and start requests all succeed and leave one consistent state', async () => {
    const f = await makeFixture(t);
    const api = client(t, f.key);
    const created = (await api.post('/', validBody(f))).json().campaign;
    const stops = await Promise.all(Array.from({ length: 12 }, () => api.post(`/${created.id}/stop`)));
    for (const r of stops) {
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.json().campaign.campaign_sends[0].status, 'paused');
    }
    const mixed = await Promise.all(Array.from({ length: 12 }, (_, i) => api.post(`/${created.id}/${i % 2 ? 'stop' : 'start'}`)));
    for (const r of mixed) assert.equal(r.statusCode, 200, r.body);
    const final = (await api.get(`/${created.id}`)).json().campaign.campaign_sends;
    assert.equal(final.length, 1);
    assert.ok(['active', 'paused'].includes(final[0].status));
    assert.deepEqual(await countRows(t.database.db, f.teamId), { campaigns: 1, sends: 1 });
  });
});
