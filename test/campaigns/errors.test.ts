// Campaigns, error paths: every validation rule of the create body (422 with one
// detail per problem, nothing written), list query bounds, 404s for unknown and
// malformed ids.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { BASE, client, countRows, insertMailAccount, insertTemplate, makeFixture, validBody, type Fixture } from './fixtures.ts';

type Detail = { field: string; message: string };

function assertError(res: { statusCode: number; json(): any; body: string }, status: number, code: string): Detail[] {
  assert.equal(res.statusCode, status, res.body);
  const body = res.json();
  assert.equal(body.ok, false);
  assert.equal(body.error.code, code);
  assert.equal(typeof body.error.message, 'string');
  return body.error.details ?? [];
}

describe('campaign errors', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  /** Posts a body that must be refused; asserts 422 and that the team still has no campaign. */
  async function refused(f: Fixture, body: unknown): Promise<Detail[]> {
    const details = assertError(await client(t, f.key).post('/', body), 422, 'VALIDATION_FAILED');
    assert.ok(details.length > 0, 'a 422 lists its problems');
    assert.deepEqual(await countRows(t.database.db, f.teamId), { campaigns: 0, sends: 0 }, 'nothing written');
    return details;
  }
  const fields = (details: Detail[]) => [...new Set(details.map((d) => d.field))].sort();

  test('required fields: each missing one is named', async () => {
    const f = await makeFixture(t);
    for (const field of ['name', 'template_ids', 'mail_account_ids', 'events']) {
      const body: Record<string, unknown> = validBody(f);
      delete body[field];
      const details = await refused(f, body);
      assert.deepEqual(details, [{ field, message: 'is required' }]);
    }
    // `events` depends on campaign_type (a broadcast has none): it is checked after the body's shape, so an
    // empty body names the three fields every campaign needs.
    assert.deepEqual(fields(await refused(f, {})), ['mail_account_ids', 'name', 'template_ids']);
  });

  test('name: empty, blank, too long or not a string', async () => {
    const f = await makeFixture(t);
    for (const name of ['', 'x'.repeat(256), 42, null]) {
      assert.deepEqual(fields(await refused(f, validBody(f, { name }))), ['name'], `name ${JSON.stringify(name)}`);
    }
    assert.deepEqual(await refused(f, validBody(f, { name: ' \t ' })), [{ field: 'name', message: 'must not be blank' }]);
    // 255 characters is fine.
    const ok = await client(t, f.key).post('/', validBody(f, { name: 'é'.repeat(255) }));
    assert.equal(ok.statusCode, 201, ok.body);
  });

  for (const list of ['template_ids', 'mail_account_ids'] as const) {
    test(`${list}: empty, too many, not UUIDs, repeated, not an array`, async () => {
      const f = await makeFixture(t);
      const own = list === 'template_ids' ? f.templateId : f.accountId;
      assert.deepEqual(fields(await refused(f, validBody(f, { [list]: [] }))), [list]);
      const many = Array.from({ length: 51 }, () => randomUUID());
      assert.deepEqual(fields(await refused(f, validBody(f, { [list]: many }))), [list]);
      assert.deepEqual(fields(await refused(f, validBody(f, { [list]: [own, 'not-a-uuid', 7] }))), [`${list}[1]`, `${list}[2]`]);
      assert.deepEqual(fields(await refused(f, validBody(f, { [list]: [`${own}0`] }))), [`${list}[0]`]);
      assert.deepEqual(fields(await refused(f, validBody(f, { [list]: own }))), [list]);
      // An exact repeat is refused by the schema; the same id in another case by the handler.
      assert.deepEqual(fields(await refused(f, validBody(f, { [list]: [own, own] }))), [list]);
      const details = await refused(f, validBody(f, { [list]: [own, own.toUpperCase()] }));
      assert.deepEqual(details, [{ field: `${list}[1]`, message: `repeats ${list}[0] (${own})` }]);
    });
  }

  test('events: empty, unknown names, webhook names, wrong types', async () => {
    const f = await makeFixture(t);
    assert.deepEqual(fields(await refused(f, validBody(f, { events: [] }))), ['events']);
    const details = await refused(f, validBody(f, { events: ['contact.saved', 'contact.created', 'email.sent', 'Lead.Created', 'lead-created', ''] }));
    assert.deepEqual(fields(details), ['events[1]', 'events[2]', 'events[3]', 'events[4]', 'events[5]']);
    assert.equal(details[0].message, 'must be one of: contact.saved, lead.created, sale.created, contact_saved, lead_created, sale_created');
    assert.deepEqual(fields(await refused(f, validBody(f, { events: ['email.contact.saved'] }))), ['events[0]']);
    assert.deepEqual(fields(await refused(f, validBody(f, { events: 'contact.saved' }))), ['events']);
    assert.deepEqual(fields(await refused(f, validBody(f, { events: [null] }))), ['events[0]']);
  });

  test('extensions: bounds, types and unknown fields', async () => {
    const f = await makeFixture(t);
    const cases: [Record<string, unknown>, string[]][] = [
      [{ event_triggered_send: { contact_cooldown_interval: -1 } }, ['event_triggered_send.contact_cooldown_interval']],
      [{ event_triggered_send: { contact_cooldown_interval: 31_536_001 } }, ['event_triggered_send.contact_cooldown_interval']],
      [{ event_triggered_send: { contact_cooldown_interval: 1.5 } }, ['event_triggered_send.contact_cooldown_interval']],
      [{ event_triggered_send: { contact_cooldown_interval: '3600' } }, ['event_triggered_send.contact_cooldown_interval']],
      [{ event_triggered_send: { contact_daily_email_cap: 0 } }, ['event_triggered_send.contact_daily_email_cap']],
      [{ event_triggered_send: { contact_daily_email_cap: 1001 } }, ['event_triggered_send.contact_daily_email_cap']],
      [{ event_triggered_send: { enabled: 'yes' } }, ['event_triggered_send.enabled']],
      [{ event_triggered_send: { events: ['contact.saved'] } }, ['event_triggered_send.events']],
      [{ event_triggered_send: null }, ['event_triggered_send']],
      [{ open_tracking: 'true' }, ['open_tracking']],
      [{ click_tracking: 1 }, ['click_tracking']],
      [{ reply_to_email: 'not an address' }, ['reply_to_email']],
      [{ reply_to_email: '' }, ['reply_to_email']],
      [{ from_name: 'x'.repeat(256) }, ['from_name']],
      [{ from_name: 'Evil\r\nBcc: all@example.com' }, ['from_name']],
      [{ reply_to_name: 'a\nb' }, ['reply_to_name']],
      [{ segment_query: { rules: 'all' } }, ['segment_query.rules']],
      [{ segment_query: {} }, ['segment_query.rules']],
      [{ segment_query: { rules: [], match: 'all' } }, ['segment_query.match']],
      [{ segment_query: { rules: Array.from({ length: 101 }, () => ({})) } }, ['segment_query.rules']],
      [{ status: 'paused' }, ['status']],
      [{ send_data: {} }, ['send_data']],
    ];
    for (const [extra, expected] of cases) {
      assert.deepEqual(fields(await refused(f, validBody(f, extra))), expected, JSON.stringify(extra).slice(0, 80));
    }
    const unknown = await refused(f, validBody(f, { colour: 'blue' }));
    assert.deepEqual(unknown, [{ field: 'colour', message: 'is not an allowed field' }]);
  });

  test('ids that are not active resources of this team: 422 naming each id and its index, nothing written', async () => {
    const f = await makeFixture(t);
    const db = t.database.db;
    const other = await makeTeam(db, 'Other team');
    const archived = await insertTemplate(db, f.teamId, 'archived');
    const foreignTemplate = await insertTemplate(db, other.teamId);
    const disabled = await insertMailAccount(db, f.teamId, 'disabled');
    const foreignAccount = await insertMailAccount(db, other.teamId);
    const unknown = randomUUID();

    const details = await refused(f, {
      name: 'Bad ids',
      template_ids: [f.templateId, archived, foreignTemplate, unknown],
      mail_account_ids: [disabled, f.accountId, foreignAccount],
      events: ['contact.saved'],
    });
    assert.deepEqual(details, [
      { field: 'template_ids[1]', message: `no active template ${archived} in this team` },
      { field: 'template_ids[2]', message: `no active template ${foreignTemplate} in this team` },
      { field: 'template_ids[3]', message: `no active template ${unknown} in this team` },
      { field: 'mail_account_ids[0]', message: `no active mail account ${disabled} in this team` },
      { field: 'mail_account_ids[2]', message: `no active mail account ${foreignAccount} in this team` },
    ]);
    // A mail account id is not a template id, and the other way round.
    const swapped = await refused(f, validBody(f, { template_ids: [f.accountId], mail_account_ids: [f.templateId] }));
    assert.deepEqual(fields(swapped), ['mail_account_ids[0]', 'template_ids[0]']);
    assert.deepEqual(await countRows(db, other.teamId), { campaigns: 0, sends: 0 });
  });

  test('schema-valid problems and id problems are reported together', async () => {
    const f = await makeFixture(t);
    const archived = await insertTemplate(t.database.db, f.teamId, 'archived');
    const details = await refused(f, validBody(f, { name: '   ', template_ids: [archived], from_name: 'a\rb' }));
    assert.deepEqual(fields(details), ['from_name', 'name', 'template_ids[0]']);
  });

  test('malformed JSON and wrong content type', async () => {
    const f = await makeFixture(t);
    const headers = { 'x-api-key': f.key, 'content-type': 'application/json' };
    const bad = await t.app.inject({ method: 'POST', url: BASE, headers, payload: '{"name": "x",' });
    assertError(bad, 422, 'VALIDATION_FAILED');
    const array = await t.app.inject({ method: 'POST', url: BASE, headers, payload: '[]' });
    assertError(array, 422, 'VALIDATION_FAILED');
    const text = await t.app.inject({ method: 'POST', url: BASE, headers: { ...headers, 'content-type': 'text/plain' }, payload: 'x' });
    assertError(text, 415, 'UNSUPPORTED_MEDIA_TYPE');
    assert.deepEqual(await countRows(t.database.db, f.teamId), { campaigns: 0, sends: 0 });
  });

  test('list query: page and per_page out of range or not integers, search too long', async () => {
    const f = await makeFixture(t);
    const api = client(t, f.key);
    for (const [query, field] of [
      ['per_page=0', 'per_page'],
      ['per_page=101', 'per_page'],
      ['per_page=-5', 'per_page'],
      ['per_page=ten', 'per_page'],
      ['per_page=1.5', 'per_page'],
      ['page=0', 'page'],
      ['page=-1', 'page'],
      ['page=abc', 'page'],
      [`search=${'a'.repeat(256)}`, 'search'],
    ]) {
      const details = assertError(await api.get(`/?${query}`), 422, 'VALIDATION_FAILED');
      assert.deepEqual(fields(details), [field], query);
    }
    for (const query of ['per_page=1', 'per_page=100', 'page=1', `search=${'a'.repeat(255)}`]) {
      assert.equal((await api.get(`/?${query}`)).statusCode, 200, query);
    }
  });

  test('unknown and malformed ids: 404 on get, start and stop (never 422 or 500)', async () => {
    const f = await makeFixture(t);
    const api = client(t, f.key);
    const ids = [
      randomUUID(),
      'not-a-uuid',
      '123',
      `urn:uuid:${randomUUID()}`,
      `${randomUUID()}0`,
      "1' OR '1'='1",
      '%E2%9C%93',
      'x'.repeat(150),
      '00000000-0000-0000-0000-00000000000g',
    ];
    for (const id of ids) {
      const path = `/${encodeURIComponent(id)}`;
      assertError(await api.get(path), 404, 'NOT_FOUND');
      assertError(await api.post(`${path}/start`), 404, 'NOT_FOUND');
      assertError(await api.post(`${path}/stop`), 404, 'NOT_FOUND');
    }
  });

  test('without a key: 401 before anything else, nothing written', async () => {
    const f = await makeFixture(t);
    const res = await t.app.inject({ method: 'POST', url: BASE, payload: validBody(f) });
    assertError(res, 401, 'UNAUTHORIZED');
    assertError(await t.app.inject({ method: 'GET', url: BASE }), 401, 'UNAUTHORIZED');
    assertError(await t.app.inject({ method: 'POST', url: `${BASE}/${randomUUID()}/start` }), 401, 'UNAUTHORIZED');
    assert.deepEqual(await countRows(t.database.db, f.teamId), { campaigns: 0, sends: 0 });
  });

  test('wrong method: 405', async () => {
    const f = await makeFixture(t);
    const res = await t.app.inject({ method: 'DELETE', url: `${BASE}/${randomUUID()}/start`, headers: { 'x-api-key': f.key } });
    assertError(res, 405, 'METHOD_NOT_ALLOWED');
  });
});
