import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

describe('contacts: validation', () => {
  let t: TestApp;
  let key: string;
  let teamId: string;
  before(async () => {
    t = await buildTestApp();
    ({ key, teamId } = await makeTeam(t.database.db));
  });
  after(() => t.close());
  const post = (url: string, payload: unknown) =>
    t.app.inject({ method: 'POST', url: `/public/v1/email/contacts/${url}`, headers: { 'x-api-key': key }, payload: payload as object });
  const count = async () => Number((await t.database.pool.query('SELECT count(*) FROM contacts WHERE team_id = $1', [teamId])).rows[0].count);
  const fields = (res: { json(): any }) => res.json().error.details.map((d: { field: string }) => d.field).sort();

  const invalid: [string, Record<string, unknown>, string][] = [
    ['missing email', { first_name: 'x' }, 'email'],
    ['bad email', { email: 'not-an-email' }, 'email'],
    ['email with two @', { email: 'a@b@c.io' }, 'email'],
    ['email too long', { email: `${'a'.repeat(300)}@x.io` }, 'email'],
    ['email as number', { email: 12 }, 'email'],
    ['first_name as number', { email: 'a@x.io', first_name: 5 }, 'first_name'],
    ['first_name too long', { email: 'a@x.io', first_name: 'x'.repeat(256) }, 'first_name'],
    ['country not ISO', { email: 'a@x.io', country_code: 'XX' }, 'country_code'],
    ['country too long', { email: 'a@x.io', country_code: 'USA' }, 'country_code'],
    ['int as string', { email: 'a@x.io', custom_int_1: '5' }, 'custom_int_1'],
    ['int not integer', { email: 'a@x.io', custom_int_2: 1.5 }, 'custom_int_2'],
    ['int beyond safe range', { email: 'a@x.io', custom_int_3: 2 ** 60 }, 'custom_int_3'],
    ['decimal as string', { email: 'a@x.io', custom_dec_1: '1.5' }, 'custom_dec_1'],
    ['datetime not ISO', { email: 'a@x.io', custom_datetime_1: 'yesterday' }, 'custom_datetime_1'],
    ['datetime without zone', { email: 'a@x.io', custom_datetime_2: '2026-01-01' }, 'custom_datetime_2'],
    // Found by the contract fuzz: valid RFC 3339 that timestamptz refuses was a 500.
    ['datetime in year 0000', { email: 'a@x.io', custom_datetime_3: '0000-01-01T00:00:00Z' }, 'custom_datetime_3'],
    ['datetime offset past 15:59', { email: 'a@x.io', custom_datetime_1: '1969-12-31T23:59:59-23:59' }, 'custom_datetime_1'],
    ['bool as string', { email: 'a@x.io', custom_bool_1: 'true' }, 'custom_bool_1'],
    ['unknown field', { email: 'a@x.io', favourite_colour: 'red' }, 'favourite_colour'],
    ['unknown custom field', { email: 'a@x.io', custom_str_6: 'x' }, 'custom_str_6'],
    ['nested custom field wrong type', { email: 'a@x.io', custom_fields: { custom_int_1: 'x' } }, 'custom_fields.custom_int_1'],
    ['nested unknown', { email: 'a@x.io', custom_fields: { first_name: 'x' } }, 'custom_fields.first_name'],
    ['empty tag', { email: 'a@x.io', tags: [''] }, 'tags[0]'],
    ['tag not string', { email: 'a@x.io', tags: [1] }, 'tags[0]'],
  ];
  for (const [name, body, field] of invalid) {
    test(`upsert: ${name} → 422 naming ${field}, nothing written`, async () => {
      const before = await count();
      const res = await post('upsert', body);
      assert.equal(res.statusCode, 422, res.body);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.ok(fields(res).includes(field), `${JSON.stringify(res.json().error.details)}`);
      assert.equal(await count(), before);
    });
  }

  test('bulk upsert: one bad contact rejects the whole request, listing every bad index', async () => {
    const before = await count();
    const contacts = Array.from({ length: 20 }, (_, i) => ({ email: `ok${i}@x.io` })) as Record<string, unknown>[];
    contacts[3] = { email: 'broken' };
    contacts[12] = { email: 'x@y.io', custom_int_1: 'nope' };
    contacts[17] = { email: 'z@y.io', country_code: 'ZZ', first_name: 3 };
    const res = await post('bulk-upsert', { contacts });
    assert.equal(res.statusCode, 422);
    assert.deepEqual(fields(res), ['contacts[12].custom_int_1', 'contacts[17].country_code', 'contacts[17].first_name', 'contacts[3].email']);
    assert.equal(await count(), before, 'nothing written');
  });

  test('bulk upsert: 0 and 1,001 contacts are 422; missing contacts is 422', async () => {
    assert.equal((await post('bulk-upsert', { contacts: [] })).statusCode, 422);
    const big = Array.from({ length: 1001 }, (_, i) => ({ email: `u${i}@x.io` }));
    const res = await post('bulk-upsert', { contacts: big });
    assert.equal(res.statusCode, 422);
    assert.deepEqual(fields(res), ['contacts']);
    assert.deepEqual(fields(await post('bulk-upsert', { tags: ['x'] })), ['contacts']);
    assert.equal(await count(), 0);
  });

  test('unsubscribe: bad e-mail, too many, reason too long → 422', async () => {
    assert.equal((await post('unsubscribe', { email: 'nope' })).statusCode, 422);
    assert.equal((await post('unsubscribe', {})).statusCode, 422);
    assert.equal((await post('unsubscribe', { email: 'a@x.io', reason: 'r'.repeat(501) })).statusCode, 422);
    assert.equal((await post('bulk-unsubscribe', { emails: [] })).statusCode, 422);
    const many = Array.from({ length: 1001 }, (_, i) => `u${i}@x.io`);
    assert.equal((await post('bulk-unsubscribe', { emails: many })).statusCode, 422);
    const mixed = await post('bulk-unsubscribe', { emails: ['ok@x.io', 'bad'] });
    assert.deepEqual(fields(mixed), ['emails[1]']);
    assert.equal(await count(), 0);
  });

  for (const q of ['per_page=0', 'per_page=101', 'page=0', 'page=-1', 'per_page=abc', `search=${'a'.repeat(256)}`]) {
    test(`unsubscribes list: ${q.slice(0, 20)} → 422`, async () => {
      const res = await t.app.inject({ url: `/public/v1/email/contacts/unsubscribes?${q}`, headers: { 'x-api-key': key } });
      assert.equal(res.statusCode, 422, res.body);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    });
  }

  test('unsubscribes list: per_page 100 and search of 255 characters are accepted', async () => {
    const res = await t.app.inject({ url: `/public/v1/email/contacts/unsubscribes?per_page=100&search=${'a'.repeat(255)}`, headers: { 'x-api-key': key } });
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().meta.per_page, 100);
  });
});

describe('contacts: strings PostgreSQL cannot store', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  test('a NUL character is a 422, never a 500, and nothing is written', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    for (const [url, payload] of [
      ['upsert', { email: 'nul@x.io', first_name: 'a\u0000b' }],
      ['bulk-upsert', { contacts: [{ email: 'ok@x.io' }, { email: 'nul@x.io', custom_str_1: '\u0000' }] }],
      ['upsert', { email: 'nul@x.io', tags: ['x\u0000'] }],
      ['unsubscribe', { email: 'nul@x.io', reason: '\u0000' }],
    ] as const) {
      const res = await t.app.inject({ method: 'POST', url: `/public/v1/email/contacts/${url}`, headers: { 'x-api-key': key }, payload });
      assert.equal(res.statusCode, 422, `${url}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    }
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM contacts WHERE team_id = $1', [teamId]);
    assert.equal(rows[0].n, 0);
  });

  // Found by the contract fuzz: "\ud800" reached the contact.saved payload,
  // which PostgreSQL's jsonb refuses (22P02): a 500.
  test('an unpaired surrogate escape is a 422 naming the field, never a 500, and nothing is written', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    for (const [url, payload, field] of [
      ['upsert', '{"email":"s@x.io","first_name":"\\ud800"}', 'first_name'],
      ['bulk-upsert', '{"contacts":[{"email":"ok@x.io"},{"email":"s@x.io","tags":["a\\udfffb"]}]}', 'contacts[1].tags[0]'],
      ['upsert', '{"email":"s@x.io","\\ud800":1}', '(body)'],
    ] as const) {
      const res = await t.app.inject({ method: 'POST', url: `/public/v1/email/contacts/${url}`, headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload });
      assert.equal(res.statusCode, 422, `${url}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.equal(res.json().error.details[0].field, field);
    }
    // A paired surrogate (an emoji written as escapes) is fine.
    const ok = await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/upsert', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload: '{"email":"ok@x.io","first_name":"\\ud83d\\udca5"}' });
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(ok.json().contact.first_name, '💥');
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM contacts WHERE team_id = $1', [teamId]);
    assert.equal(rows[0].n, 1);
  });

  test('a page number past what OFFSET allows is a 422, not a 500', async () => {
    const { key } = await makeTeam(t.database.db);
    const res = await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes?page=100000000000000000000', headers: { 'x-api-key': key } });
    assert.equal(res.statusCode, 422);
  });
});
