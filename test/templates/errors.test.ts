import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { insertCampaign } from './campaign-rows.ts';

type Res = { statusCode: number; body: string; json(): any };

function assertError(res: Res, status: number, code: string) {
  assert.equal(res.statusCode, status, res.body);
  const body = res.json();
  assert.equal(body.ok, false);
  assert.equal(body.error.code, code);
  return body.error as { code: string; message: string; details?: { field: string; message: string }[] };
}

/** A 422 whose details name exactly these fields (in any order). */
function assert422(res: Res, fields: string[]) {
  const error = assertError(res, 422, 'VALIDATION_FAILED');
  assert.deepEqual([...new Set(error.details!.map((d) => d.field))].sort(), [...fields].sort(), JSON.stringify(error.details));
  return error.details!;
}

describe('templates: validation and conflicts', () => {
  let t: TestApp;
  let key: string;
  let teamId: string;
  before(async () => {
    t = await buildTestApp();
    ({ key, teamId } = await makeTeam(t.database.db));
  });
  after(() => t.close());

  const valid = { name: 'n', content: '<p>x</p>', content_type: 'html' };
  const create = (body: unknown) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/templates', headers: { 'x-api-key': key }, payload: body as object });
  const get = (url: string) => t.app.inject({ url, headers: { 'x-api-key': key } });
  const del = (id: string) => t.app.inject({ method: 'DELETE', url: `/public/v1/email/templates/${id}`, headers: { 'x-api-key': key } });
  /** The template is gone: the answer says so, the row is deleted and the API no longer finds it. */
  const assertDeleted = async (res: Res, id: string, what: string) => {
    assert.equal(res.statusCode, 200, `${what}: ${res.body}`);
    assert.deepEqual(res.json(), { ok: true }, what);
    const row = await t.database.db.selectFrom('templates').select('id').where('id', '=', id).executeTakeFirst();
    assert.equal(row, undefined, `${what}: the row is deleted`);
    assertError(await get(`/public/v1/email/templates/${id}`), 404, 'NOT_FOUND');
  };
  const countTemplates = async () =>
    Number((await t.database.db.selectFrom('templates').select((eb) => eb.fn.countAll().as('n')).where('team_id', '=', teamId).executeTakeFirstOrThrow()).n);

  test('name: missing, empty, blank and too long are 422', async () => {
    const before = await countTemplates();
    assert422(await create({ content: '<p>x</p>', content_type: 'html' }), ['name']);
    assert422(await create({ ...valid, name: '' }), ['name']);
    const blank = assert422(await create({ ...valid, name: '   ' }), ['name']);
    assert.equal(blank[0].message, 'must not be blank');
    assert422(await create({ ...valid, name: 'x'.repeat(256) }), ['name']);
    assert.equal((await create({ ...valid, name: 'x'.repeat(255) })).statusCode, 201);
    assert422(await create({ ...valid, name: 42 }), ['name']);
    assert.equal(await countTemplates(), before + 1, 'only the valid one was saved');
  });

  test('content: missing, empty, and over 1 MiB are 422; exactly 1 MiB is accepted', async () => {
    assert422(await create({ name: 'n', content_type: 'html' }), ['content']);
    assert422(await create({ ...valid, content: '' }), ['content']);
    const tooBig = await create({ ...valid, content: 'x'.repeat(1024 * 1024 + 1) });
    const details = assert422(tooBig, ['content']);
    assert.match(details[0].message, /1048576/);
    const max = await create({ ...valid, content: 'x'.repeat(1024 * 1024) });
    assert.equal(max.statusCode, 201);
    assert.equal(max.json().template.content.length, 1024 * 1024);
  });

  test('content_type: missing or anything but html is 422', async () => {
    assert422(await create({ name: 'n', content: '<p>x</p>' }), ['content_type']);
    for (const contentType of ['text', 'HTML', 'mjml', '', 1]) {
      assert422(await create({ ...valid, content_type: contentType }), ['content_type']);
    }
  });

  test('a Liquid syntax error in content is 422 naming the line', async () => {
    const before = await countTemplates();
    const res = await create({ ...valid, content: '<p>one</p>\n<p>two</p>\n{% if contact.first_name %}hello\n<p>four</p>' });
    const details = assert422(res, ['content']);
    assert.match(details[0].message, /^Liquid syntax error at line 3: /);
    assert.match(details[0].message, /not closed/);
    assert.equal(await countTemplates(), before);
  });

  test('Liquid errors in subject and alt_content are reported with the content error, each with its line', async () => {
    const res = await create({
      ...valid,
      content: 'line 1\n{{ contact.first_name',
      subject: 'Hi {% endif %}',
      alt_content: 'a\nb\nc\n{{ x | no_such_filter }}',
    });
    const details = assert422(res, ['content', 'subject', 'alt_content']);
    const by = Object.fromEntries(details.map((d) => [d.field, d.message]));
    assert.match(by.content, /^Liquid syntax error at line 2: /);
    assert.match(by.subject, /^Liquid syntax error at line 1: /);
    assert.match(by.alt_content, /^Liquid syntax error at line 4: .*no_such_filter/);
  });

  test('file-reading tags (include, render, layout) are refused at create', async () => {
    for (const tag of ['{% include "/etc/passwd" %}', '{% render "x" %}', '{% layout "x" %}']) {
      const details = assert422(await create({ ...valid, content: `<p>a</p>\n${tag}` }), ['content']);
      assert.match(details[0].message, /line 2: .*not available/);
    }
  });

  test('subject: over 998 characters or more than one line is 422', async () => {
    assert422(await create({ ...valid, subject: 'x'.repeat(999) }), ['subject']);
    assert.equal((await create({ ...valid, subject: 'x'.repeat(998) })).statusCode, 201);
    assert422(await create({ ...valid, subject: 'one\r\nBcc: victim@example.com' }), ['subject']);
  });

  test('unknown fields are 422, at the top and inside meta', async () => {
    const top = assert422(await create({ ...valid, scope: 'public' }), ['scope']);
    assert.equal(top[0].message, 'is not an allowed field');
    assert422(await create({ ...valid, meta: { tags: ['a'], color: 'red' } }), ['meta.color']);
    assert422(await create({ ...valid, meta: { tags: 'a' } }), ['meta.tags']);
    assert422(await create({ ...valid, meta: { tags: [''] } }), ['meta.tags[0]']);
  });

  test('NUL characters (valid JSON, refused by PostgreSQL text) are 422, not 500', async () => {
    const before = await countTemplates();
    assert422(
      await create({ ...valid, name: 'a\u0000b', content: '<p>\u0000</p>', subject: '\u0000', alt_content: 'x\u0000', meta: { json_schema: '\u0000', tags: ['ok', 'b\u0000'] } }),
      ['name', 'content', 'subject', 'alt_content', 'meta.json_schema', 'meta.tags[1]'],
    );
    assert.equal(await countTemplates(), before);
    assert422(await get('/public/v1/email/templates?search=a%00b'), ['search']);
  });

  test('every problem is reported at once', async () => {
    assert422(await create({ name: '', content: '', content_type: 'txt', extra: 1 }), ['name', 'content', 'content_type', 'extra']);
  });

  test('list: per_page 0 and 101, page 0, bad include values are 422', async () => {
    for (const query of ['per_page=0', 'per_page=101', 'page=0', 'page=-1', 'page=abc', 'per_page=1.5', 'include[]=secrets']) {
      const error = assertError(await get(`/public/v1/email/templates?${query}`), 422, 'VALIDATION_FAILED');
      assert.ok(error.details!.length > 0, query);
    }
    await create(valid);
    await create(valid);
    for (const perPage of [100, 1]) {
      const res = await get(`/public/v1/email/templates?per_page=${perPage}`);
      assert.equal(res.statusCode, 200, res.body);
      const { templates: { data }, meta } = res.json();
      assert.equal(meta.per_page, perPage);
      assert.ok(data.length >= 1 && data.length <= perPage, `per_page=${perPage}: ${data.length} templates`);
    }
  });

  test('list: a page past the end is an empty page; one past the page bound is a 422, not a database error', async () => {
    const res = await get('/public/v1/email/templates?page=1000000');
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().templates.data, []);
    assertError(await get('/public/v1/email/templates?page=100000000000000000000'), 422, 'VALIDATION_FAILED');
  });

  test('a non-UUID or unknown id is 404 on get and delete', async () => {
    for (const id of ['nope', '123', 'urn:uuid:0190a6c8-0000-7000-8000-000000000000', '0190a6c8-0000-7000-8000-00000000000g', '0190a6c8-0000-7000-8000-000000000000']) {
      assertError(await get(`/public/v1/email/templates/${encodeURIComponent(id)}`), 404, 'NOT_FOUND');
      assertError(await del(encodeURIComponent(id)), 404, 'NOT_FOUND');
    }
  });

  test('delete is 409 while an active or paused campaign uses the template', async () => {
    for (const status of ['active', 'paused']) {
      const tpl = (await create(valid)).json().template;
      const other = (await create(valid)).json().template;
      await insertCampaign(t.database.db, teamId, [other.id, tpl.id], [status]);
      const error = assertError(await del(tpl.id), 409, 'CONFLICT');
      assert.match(error.message, /campaign/);
      const row = await t.database.db.selectFrom('templates').select('id').where('id', '=', tpl.id).executeTakeFirst();
      assert.ok(row, `the template is still there (${status})`);
    }
  });

  test('delete is allowed once the latest send of the campaign is completed or failed', async () => {
    for (const status of ['completed', 'failed']) {
      const tpl = (await create(valid)).json().template;
      // An older send was active; only the latest one counts.
      await insertCampaign(t.database.db, teamId, [tpl.id], ['active', status]);
      await assertDeleted(await del(tpl.id), tpl.id, status);
    }
  });

  test('delete is 409 when the latest send is active even if an older one completed', async () => {
    const tpl = (await create(valid)).json().template;
    await insertCampaign(t.database.db, teamId, [tpl.id], ['completed', 'active']);
    assertError(await del(tpl.id), 409, 'CONFLICT');
  });

  test('a campaign naming other templates does not block the delete', async () => {
    const tpl = (await create(valid)).json().template;
    const other = (await create(valid)).json().template;
    await insertCampaign(t.database.db, teamId, [other.id], ['active']);
    await assertDeleted(await del(tpl.id), tpl.id, 'unrelated campaign');
    // The other template, which the active campaign names, stays.
    assertError(await del(other.id), 409, 'CONFLICT');
  });

  test('malformed JSON and a non-object body are 422', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/public/v1/email/templates',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      payload: '{"name": "x",',
    });
    assertError(res, 422, 'VALIDATION_FAILED');
    assertError(await create([valid]), 422, 'VALIDATION_FAILED');
  });
});
