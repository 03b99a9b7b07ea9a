// The contact management routes: list (filters, pages), get by id or address,
// PATCH (fields, custom fields, tags replaced/added/removed, the tag cap, the
// contact.saved event), errors and other teams.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

describe('contacts API: list, get, patch', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp({ config: { contactMaxTags: 5 } });
  });
  after(() => t.close());

  const call = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1/email/contacts${url}`, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload: payload as object }) });
  const upsert = async (key: string, body: Record<string, unknown>) => {
    const res = await call(key, 'POST', '/upsert', body);
    assert.equal(res.statusCode, 200, res.body);
    return res.json().contact as Record<string, any>;
  };
  const savedEvents = async (teamId: string, contactId: string) =>
    (await sql<{ n: number }>`SELECT count(*)::int AS n FROM events WHERE team_id = ${teamId} AND contact_id = ${contactId} AND name = 'contact.saved'`.execute(t.database.db)).rows[0]!.n;

  test('list: newest first, pages as the other lists, and each filter', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const other = await makeTeam(t.database.db, 'other');
    await upsert(other.key, { email: 'ada@example.com' });
    for (let i = 0; i < 25; i++) await upsert(key, { email: `user${String(i).padStart(2, '0')}@example.com`, tags: i % 5 === 0 ? ['vip'] : [] });
    await upsert(key, { email: 'ada@example.com', tags: ['vip'] });
    await upsert(key, { email: 'ada_x@example.com' });
    await upsert(key, { email: 'adaxx@example.com' });
    await call(key, 'POST', '/unsubscribe', { email: 'user03@example.com' });
    // Spread the creation times so the range filter has something to cut.
    await sql`UPDATE contacts SET created_at = '2026-01-01T00:00:00Z'::timestamptz + (substring(email from 5 for 2)::int || ' hours')::interval
               WHERE team_id = ${teamId} AND email LIKE 'user%'`.execute(t.database.db);

    const page1 = await call(key, 'GET', '');
    assert.equal(page1.statusCode, 200, page1.body);
    const b1 = page1.json();
    assert.deepEqual(b1.meta, { current_page: '1', per_page: 20, total: '28', last_page: '2' });
    assert.equal(b1.contacts.length, 20);
    const times: string[] = b1.contacts.map((c: any) => c.created_at);
    assert.deepEqual([...times].sort((x, y) => (x < y ? 1 : x > y ? -1 : 0)), times, 'newest first');
    assert.ok(b1.contacts.every((c: any) => c.team_id === teamId));
    assert.equal(typeof b1.contacts[0].sent_count, 'string', 'the contact object of the other contact routes');
    const page2 = (await call(key, 'GET', '?page=2&per_page=20')).json();
    assert.equal(page2.contacts.length, 8);
    const all = new Set([...b1.contacts, ...page2.contacts].map((c: any) => c.id));
    assert.equal(all.size, 28, 'pages do not overlap');
    assert.deepEqual((await call(key, 'GET', '?page=9')).json().contacts, []);

    const emails = async (q: string) => {
      const res = await call(key, 'GET', q);
      assert.equal(res.statusCode, 200, res.body);
      return (res.json().contacts as any[]).map((c) => String(c.email)).sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
    };
    assert.deepEqual(await emails('?status=unsubscribed'), ['user03@example.com']);
    assert.deepEqual(await emails('?tag=vip'), ['ada@example.com', 'user00@example.com', 'user05@example.com', 'user10@example.com', 'user15@example.com', 'user20@example.com']);
    assert.deepEqual(await emails('?search=ADA'), ['ada@example.com', 'ada_x@example.com', 'adaxx@example.com'], 'prefix, case-insensitive');
    assert.deepEqual(await emails('?search=ada_'), ['ada_x@example.com'], '_ is literal');
    assert.deepEqual(await emails('?search=%25'), [], '% is literal');
    assert.deepEqual(await emails('?search=example'), [], 'a prefix, not a substring');
    assert.deepEqual(
      await emails(`?created_after=${encodeURIComponent('2026-01-01T03:00:00Z')}&created_before=${encodeURIComponent('2026-01-01T06:00:00Z')}`),
      ['user03@example.com', 'user04@example.com', 'user05@example.com'],
      'after is inclusive, before exclusive',
    );
    assert.deepEqual(await emails('?tag=vip&created_before=2026-01-01T06:00:00.000Z'), ['user00@example.com', 'user05@example.com']);
  });

  test('list: out-of-range and malformed filters are 422 naming the field', async () => {
    const { key } = await makeTeam(t.database.db);
    for (const [q, field] of [
      ['?per_page=101', 'per_page'], ['?page=0', 'page'], ['?status=gone', 'status'], ['?created_after=yesterday', 'created_after'],
      ['?search=', 'search'], [`?search=${'a'.repeat(321)}`, 'search'], ['?tag=', 'tag'],
      ['?created_after=2026-02-01T00:00:00Z&created_before=2026-01-01T00:00:00Z', 'created_before'],
    ] as const) {
      const res = await call(key, 'GET', q);
      assert.equal(res.statusCode, 422, `${q}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.ok(res.json().error.details.some((d: any) => d.field === field), `${q}: ${res.body}`);
    }
  });

  test('get by id and by address; another team\'s contact is 404', async () => {
    const { key } = await makeTeam(t.database.db);
    const other = await makeTeam(t.database.db, 'other');
    const c = await upsert(key, { email: 'Grace+Hopper@Example.com', first_name: 'Grace', custom_int_1: 7, tags: ['a'] });
    const byId = await call(key, 'GET', `/${c.id}`);
    assert.equal(byId.statusCode, 200, byId.body);
    assert.deepEqual(byId.json().contact, c, 'the same contact object the upsert answers');
    const byEmail = await call(key, 'GET', `/by-email?email=${encodeURIComponent(' GRACE+hopper@example.com ')}`);
    assert.equal(byEmail.statusCode, 200, byEmail.body);
    assert.equal(byEmail.json().contact.id, c.id);

    for (const [k, url] of [
      [other.key, `/${c.id}`], [other.key, `/by-email?email=${encodeURIComponent('grace+hopper@example.com')}`],
      [key, '/0190a5b0-0000-7000-8000-000000000000'], [key, '/not-a-uuid'], [key, '/by-email?email=nobody%40example.com'], [key, '/by-email?email=not-an-address'],
    ] as const) {
      const res = await call(k, 'GET', url);
      assert.equal(res.statusCode, 404, `${url}: ${res.body}`);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
    assert.equal((await t.app.inject({ method: 'GET', url: `/public/v1/email/contacts/${c.id}` })).statusCode, 401);
  });

  test('patch: fields (absent keeps, null clears), custom fields merge, one contact.saved per real change', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const c = await upsert(key, { email: 'lin@example.com', first_name: 'Lin', last_name: 'Wu', custom_str_1: 'one', custom_int_2: 5, tags: ['x'] });
    assert.equal(await savedEvents(teamId, c.id), 1);
    const res = await call(key, 'PATCH', `/${c.id}`, {
      last_name: null, country_code: 'de', custom_fields: { custom_str_2: 'two', custom_bool_1: true }, custom_dec_1: 1.5,
      custom_datetime_1: '2026-03-01T10:00:00+02:00',
    });
    assert.equal(res.statusCode, 200, res.body);
    const p = res.json();
    assert.equal(p.changed, true);
    assert.equal(p.contact.first_name, 'Lin', 'absent keeps');
    assert.equal(p.contact.last_name, null, 'null clears');
    assert.equal(p.contact.country_code, 'DE');
    assert.equal(p.contact.custom_str_1, 'one', 'custom fields merge');
    assert.equal(p.contact.custom_str_2, 'two');
    assert.equal(p.contact.custom_int_2, '5');
    assert.equal(p.contact.custom_bool_1, 'true');
    assert.equal(p.contact.custom_dec_1, '1.5');
    assert.equal(p.contact.custom_datetime_1, '2026-03-01T08:00:00.000Z');
    assert.deepEqual(p.contact.tags, ['x'], 'tags untouched');
    assert.ok(p.contact.updated_at > c.updated_at);
    assert.deepEqual((await call(key, 'GET', `/${c.id}`)).json().contact, p.contact, 'stored as answered');
    assert.equal(await savedEvents(teamId, c.id), 2, 'the change emitted contact.saved');

    const same = await call(key, 'PATCH', `/${c.id}`, { last_name: null, custom_str_2: 'two' });
    assert.equal(same.statusCode, 200, same.body);
    assert.equal(same.json().changed, false);
    assert.equal(same.json().contact.updated_at, p.contact.updated_at);
    const empty = await call(key, 'PATCH', `/${c.id}`, {});
    assert.equal(empty.json().changed, false);
    assert.equal(await savedEvents(teamId, c.id), 2, 'no change, no event');
    const payload = (await sql<{ payload: any }>`SELECT payload FROM events WHERE contact_id = ${c.id} ORDER BY created_at DESC LIMIT 1`.execute(t.database.db)).rows[0]!.payload;
    assert.equal(payload.email, 'lin@example.com');
    assert.equal(payload.country_code, 'DE');
    assert.equal(payload.updated_at, p.contact.updated_at, 'the contact.saved payload of a save');
  });

  test('patch: tags replace, add and remove; the per-contact cap stops growth only', async () => {
    const { key } = await makeTeam(t.database.db);
    const c = await upsert(key, { email: 'tags@example.com', tags: ['a', 'b', 'c'] });
    const patch = async (body: unknown) => {
      const res = await call(key, 'PATCH', `/${c.id}`, body);
      assert.equal(res.statusCode, 200, res.body);
      return res.json().contact.tags as string[];
    };
    assert.deepEqual(await patch({ add_tags: ['d', 'a', ' e '], remove_tags: ['b', 'zz'] }), ['a', 'c', 'd', 'e']);
    assert.deepEqual(await patch({ tags: ['z', 'y', 'z'] }), ['z', 'y'], 'replaced, each once');
    assert.deepEqual(await patch({ tags: [] }), []);
    assert.deepEqual(await patch({ add_tags: ['1', '2', '3', '4', '5'] }), ['1', '2', '3', '4', '5'], 'up to the cap (5 here)');

    const over = await call(key, 'PATCH', `/${c.id}`, { add_tags: ['6'], first_name: 'Not written' });
    assert.equal(over.statusCode, 422, over.body);
    assert.deepEqual(over.json().error.details, [{ field: 'add_tags', message: 'the contact would have 6 tags; at most 5 tags per contact (CONTACT_MAX_TAGS)' }]);
    const replaceOver = await call(key, 'PATCH', `/${c.id}`, { tags: ['a', 'b', 'c', 'd', 'e', 'f'] });
    assert.equal(replaceOver.statusCode, 422, replaceOver.body);
    assert.equal(replaceOver.json().error.details[0].field, 'tags');
    const stored = (await call(key, 'GET', `/${c.id}`)).json().contact;
    assert.deepEqual(stored.tags, ['1', '2', '3', '4', '5'], 'nothing written');
    assert.equal(stored.first_name, null);
    // A contact over a lowered cap may still lose tags or keep the ones it has.
    await sql`UPDATE contacts SET tags = ARRAY['1','2','3','4','5','6','7'] WHERE id = ${c.id}`.execute(t.database.db);
    assert.deepEqual(await patch({ remove_tags: ['7'] }), ['1', '2', '3', '4', '5', '6']);
    assert.deepEqual(await patch({ first_name: 'Kept' }), ['1', '2', '3', '4', '5', '6']);
  });

  test('patch: errors are 422 naming the field, nothing written; unknown or another team\'s id is 404', async () => {
    const { key } = await makeTeam(t.database.db);
    const other = await makeTeam(t.database.db, 'other');
    const c = await upsert(key, { email: 'err@example.com', first_name: 'Err', tags: ['a'] });
    for (const [body, field] of [
      [{ email: 'new@example.com' }, 'email'],
      [{ tags: ['a'], add_tags: ['b'] }, 'tags'],
      [{ add_tags: ['b'], remove_tags: ['b'] }, 'add_tags'],
      [{ custom_int_1: 'seven' }, 'custom_int_1'],
      [{ country_code: 'XX' }, 'country_code'],
      [{ add_tags: [''] }, 'add_tags[0]'],
      [{ custom_fields: { nope: 1 } }, 'custom_fields.nope'],
      [{ custom_datetime_1: '0000-01-01T00:00:00Z' }, 'custom_datetime_1'],
    ] as const) {
      const res = await call(key, 'PATCH', `/${c.id}`, body);
      assert.equal(res.statusCode, 422, `${JSON.stringify(body)}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
      assert.ok(res.json().error.details.some((d: any) => d.field === field), `${JSON.stringify(body)}: ${res.body}`);
    }
    const bad = await t.app.inject({ method: 'PATCH', url: `/public/v1/email/contacts/${c.id}`, headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload: '{"first_name":' });
    assert.equal(bad.statusCode, 422, bad.body);
    for (const [k, id] of [[other.key, c.id], [key, '0190a5b0-0000-7000-8000-000000000000'], [key, 'nope']] as const) {
      const res = await call(k, 'PATCH', `/${id}`, { first_name: 'Mallory' });
      assert.equal(res.statusCode, 404, res.body);
    }
    const stored = (await call(key, 'GET', `/${c.id}`)).json().contact;
    assert.equal(stored.first_name, 'Err');
    assert.deepEqual(stored.tags, ['a']);
  });
});
