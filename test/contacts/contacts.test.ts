import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';

describe('contacts: upsert, bulk upsert, unsubscribes', () => {
  let t: TestApp;
  before(async () => {
    // The deadlock test runs three bulk requests of one team at once, over the
    // default per-team cap (2; test/http/intake.test.ts tests the cap itself).
    t = await buildTestApp({ config: { intake: { ...testConfig().intake, heavyRequestsPerTeam: 4 } } });
  });
  after(() => t.close());
  const post = (key: string, url: string, payload: unknown) =>
    t.app.inject({ method: 'POST', url: `/public/v1/email/contacts/${url}`, headers: { 'x-api-key': key }, payload: payload as object });

  test('upsert creates, then updates; e-mail trimmed and lower-cased; every field rendered as a string', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const res = await post(key, 'upsert', {
      email: '  Ada@Example.COM ',
      first_name: 'Ada',
      last_name: 'Lovelace',
      country_code: 'gb',
      custom_int_1: 42,
      custom_dec_1: 3.25,
      custom_bool_1: true,
      custom_datetime_1: '2026-01-15T10:30:00Z',
      tags: ['vip'],
    });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.ok, true);
    assert.equal(body.created, true);
    const c = body.contact;
    assert.equal(c.email, 'ada@example.com');
    assert.equal(c.team_id, teamId);
    assert.equal(c.status, 'active');
    assert.equal(c.country_code, 'GB');
    assert.equal(c.custom_int_1, '42');
    assert.equal(c.custom_dec_1, '3.25');
    assert.equal(c.custom_bool_1, 'true');
    assert.equal(c.custom_datetime_1, '2026-01-15T10:30:00.000Z');
    assert.equal(c.sent_count, '0');
    assert.equal(c.is_email_valid, 'true');
    assert.equal(c.validation_method, 'syntax');
    assert.equal(c.unsubscribed_at, null);
    assert.match(c.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.deepEqual(c.tags, ['vip']);

    const again = await post(key, 'upsert', { email: 'ada@example.com', first_name: 'Augusta' });
    assert.equal(again.json().created, false);
    assert.equal(again.json().contact.first_name, 'Augusta');
    assert.equal(again.json().contact.id, c.id);
  });

  test('absent keeps, null clears, tags are added and never removed', async () => {
    const { key } = await makeTeam(t.database.db);
    await post(key, 'upsert', { email: 'a@x.io', first_name: 'A', last_name: 'B', custom_str_2: 'keep', tags: ['one'] });
    const res = await post(key, 'upsert', { email: 'a@x.io', last_name: null, tags: ['two'] });
    const c = res.json().contact;
    assert.equal(c.first_name, 'A', 'absent keeps');
    assert.equal(c.last_name, null, 'null clears');
    assert.equal(c.custom_str_2, 'keep');
    assert.deepEqual(c.tags, ['one', 'two']);
    const res2 = await post(key, 'upsert', { email: 'a@x.io', tags: [] });
    assert.deepEqual(res2.json().contact.tags, ['one', 'two']);
  });

  test('nested custom_fields mean the same as top-level fields', async () => {
    const { key } = await makeTeam(t.database.db);
    const res = await post(key, 'upsert', { email: 'n@x.io', custom_fields: { custom_int_1: 7, custom_str_1: 'nested' } });
    assert.equal(res.json().contact.custom_int_1, '7');
    assert.equal(res.json().contact.custom_str_1, 'nested');
    const res2 = await post(key, 'upsert', { email: 'n@x.io', custom_str_1: 'top', custom_fields: { custom_str_1: 'nested2' } });
    assert.equal(res2.json().contact.custom_str_1, 'top', 'top level wins');
  });

  test('an upsert never resubscribes an unsubscribed contact', async () => {
    const { key } = await makeTeam(t.database.db);
    await post(key, 'upsert', { email: 'u@x.io', first_name: 'U' });
    const un = await post(key, 'unsubscribe', { email: 'U@x.io', reason: 'too many' });
    assert.equal(un.statusCode, 200, un.body);
    assert.equal(un.json().contact.status, 'unsubscribed');
    assert.equal(un.json().contact.unsubscribed_reason, 'too many');
    const res = await post(key, 'upsert', { email: 'u@x.io', first_name: 'Back' });
    assert.equal(res.json().contact.status, 'unsubscribed');
    assert.equal(res.json().contact.first_name, 'Back');
  });

  test('bulk upsert: summary counts created, updated, unchanged; duplicates merged, later fields winning', async () => {
    const { key } = await makeTeam(t.database.db);
    const first = await post(key, 'bulk-upsert', {
      contacts: [
        { email: 'b1@x.io', first_name: 'One' },
        { email: 'b2@x.io', first_name: 'Two' },
        { email: 'B1@x.io', last_name: 'Later', first_name: 'Uno' },
      ],
      tags: ['import'],
    });
    assert.equal(first.statusCode, 200, first.body);
    assert.deepEqual(first.json().summary, { received: 3, created: 2, updated: 0, unchanged: 0 });
    const second = await post(key, 'bulk-upsert', {
      contacts: [{ email: 'b1@x.io', first_name: 'Uno' }, { email: 'b2@x.io', first_name: 'Dos' }, { email: 'b3@x.io' }],
    });
    assert.deepEqual(second.json().summary, { received: 3, created: 1, updated: 1, unchanged: 1 });
    const rows = await t.database.db.selectFrom('contacts').selectAll().where('email', 'in', ['b1@x.io', 'b2@x.io']).orderBy('email').execute();
    assert.equal(rows[0].first_name, 'Uno');
    assert.equal(rows[0].last_name, 'Later');
    assert.deepEqual(rows[0].tags, ['import']);
    assert.equal(rows[1].first_name, 'Dos');
  });

  test('bulk upsert of 1,000 contacts with every field', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const contacts = Array.from({ length: 1000 }, (_, i) => ({
      email: `user${i}@bulk.example`,
      first_name: `F${i}`,
      last_name: `L${i}`,
      phone: `+1555${i}`,
      foreign_id: `ext-${i}`,
      country_code: 'US',
      custom_str_1: 's', custom_str_2: 's', custom_str_3: 's', custom_str_4: 's', custom_str_5: 's',
      custom_int_1: i, custom_int_2: 2, custom_int_3: 3, custom_int_4: 4, custom_int_5: 5,
      custom_dec_1: 1.5, custom_dec_2: 2.5, custom_dec_3: 3.5,
      custom_datetime_1: '2026-01-01T00:00:00Z', custom_datetime_2: '2026-01-02T00:00:00Z', custom_datetime_3: '2026-01-03T00:00:00+02:00',
      custom_bool_1: true, custom_bool_2: false, custom_bool_3: null,
    }));
    const res = await post(key, 'bulk-upsert', { contacts, tags: ['big'] });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().summary, { received: 1000, created: 1000, updated: 0, unchanged: 0 });
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n, sum(custom_int_1)::int AS s FROM contacts WHERE team_id = $1', [teamId]);
    assert.deepEqual(rows[0], { n: 1000, s: (999 * 1000) / 2 });
  });

  // Found by the contract fuzz's concurrent bursts: batches sharing addresses in
  // opposite orders deadlocked in PostgreSQL (40P01), a 500 for one of them.
  test('concurrent bulk upserts and unsubscribes over the same addresses in opposite orders: all succeed, no deadlock', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const emails = Array.from({ length: 50 }, (_, i) => `dl${String(i).padStart(2, '0')}@example.com`);
    const reversed = [...emails].reverse();
    // Before the fix, 40 rounds deadlocked a few times on every run.
    for (let round = 0; round < 40; round++) {
      const results = await Promise.all([
        post(key, 'bulk-upsert', { contacts: emails.map((email) => ({ email, custom_int_1: round })) }),
        post(key, 'bulk-upsert', { contacts: reversed.map((email) => ({ email, custom_int_2: round })) }),
        post(key, 'bulk-unsubscribe', { emails: reversed.slice(0, 20) }),
        post(key, 'upsert', { email: emails[3], first_name: `r${round}` }),
      ]);
      for (const res of results) assert.equal(res.statusCode, 200, `round ${round}: ${res.body}`);
    }
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n, min(custom_int_1) AS a, min(custom_int_2) AS b FROM contacts WHERE team_id = $1', [teamId]);
    assert.deepEqual(rows[0], { n: 50, a: 39, b: 39 });
  });

  test('unsubscribes list: paginated, searchable, every field of 2.5 as strings', async () => {
    const { key } = await makeTeam(t.database.db);
    await post(key, 'bulk-upsert', { contacts: Array.from({ length: 5 }, (_, i) => ({ email: `l${i}@list.io` })) });
    const bulk = await post(key, 'bulk-unsubscribe', { emails: ['l0@list.io', 'l1@list.io', 'l2@list.io', 'new@other.io', 'L0@list.io'], reason: 'r' });
    assert.equal(bulk.statusCode, 200, bulk.body);
    assert.deepEqual(bulk.json().summary, { received: 5, unsubscribed: 4, unchanged: 0 });
    const again = await post(key, 'bulk-unsubscribe', { emails: ['l0@list.io'] });
    assert.deepEqual(again.json().summary, { received: 1, unsubscribed: 0, unchanged: 1 });

    const list = await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes?per_page=2&page=1', headers: { 'x-api-key': key } });
    assert.equal(list.statusCode, 200, list.body);
    const body = list.json();
    assert.equal(body.contacts.length, 2);
    assert.deepEqual(body.meta, { current_page: '1', per_page: 2, total: '4', last_page: '2' });
    for (const c of body.contacts) {
      assert.equal(c.status, 'unsubscribed');
      for (const f of ['opens_count', 'clicks_count', 'hard_bounces_count', 'sales_count']) assert.equal(c[f], '0');
      assert.ok('custom_bool_3' in c && 'first_bounced_at' in c && 'validated_at' in c);
    }
    const page2 = await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes?per_page=2&page=2', headers: { 'x-api-key': key } });
    const all = [...body.contacts, ...page2.json().contacts].map((c: { email: string }) => c.email);
    assert.equal(new Set(all).size, 4, 'pages do not overlap');

    const search = await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes?search=OTHER', headers: { 'x-api-key': key } });
    assert.deepEqual(search.json().contacts.map((c: { email: string }) => c.email), ['new@other.io']);
    const wildcard = await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes?search=%25', headers: { 'x-api-key': key } });
    assert.equal(wildcard.json().contacts.length, 0, 'LIKE wildcards are literal');
  });
});
