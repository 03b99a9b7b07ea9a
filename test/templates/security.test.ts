import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { renderTemplate } from '../../src/templates/render.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { insertCampaign } from './campaign-rows.ts';

describe('templates: team isolation', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const create = (key: string, name: string) =>
    t.app.inject({
      method: 'POST',
      url: '/public/v1/email/templates',
      headers: { 'x-api-key': key },
      payload: { name, content: `<p>${name}</p>`, content_type: 'html' },
    });
  const exists = async (id: string) =>
    (await t.database.db.selectFrom('templates').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;

  test("another team's template is 404 on get and delete, and is left alone", async () => {
    const a = await makeTeam(t.database.db, 'A');
    const b = await makeTeam(t.database.db, 'B');
    const tpl = (await create(a.key, 'secret plan')).json().template;

    const got = await t.app.inject({ url: `/public/v1/email/templates/${tpl.id}`, headers: { 'x-api-key': b.key } });
    assert.equal(got.statusCode, 404);
    assert.equal(got.json().error.code, 'NOT_FOUND');
    assert.ok(!got.body.includes('secret plan'));

    const deleted = await t.app.inject({ method: 'DELETE', url: `/public/v1/email/templates/${tpl.id}`, headers: { 'x-api-key': b.key } });
    assert.equal(deleted.statusCode, 404);
    assert.ok(await exists(tpl.id), 'still there');

    const own = await t.app.inject({ url: `/public/v1/email/templates/${tpl.id}`, headers: { 'x-api-key': a.key } });
    assert.equal(own.statusCode, 200);
  });

  test("a list shows only the team's own templates, search included", async () => {
    const a = await makeTeam(t.database.db, 'A');
    const b = await makeTeam(t.database.db, 'B');
    const mine = (await create(a.key, 'Shared name')).json().template;
    await create(b.key, 'Shared name');
    await create(b.key, 'Other');
    for (const url of ['/public/v1/email/templates', '/public/v1/email/templates?search=shared&include[]=content']) {
      const body = (await t.app.inject({ url, headers: { 'x-api-key': a.key } })).json();
      assert.deepEqual(body.templates.data.map((x: { id: string }) => x.id), [mine.id], url);
      assert.equal(body.meta.total, '1');
    }
  });

  test("another team's running campaign naming the id does not block a delete", async () => {
    const a = await makeTeam(t.database.db, 'A');
    const b = await makeTeam(t.database.db, 'B');
    const tpl = (await create(a.key, 'mine')).json().template;
    await insertCampaign(t.database.db, b.teamId, [tpl.id], ['active']);
    const res = await t.app.inject({ method: 'DELETE', url: `/public/v1/email/templates/${tpl.id}`, headers: { 'x-api-key': a.key } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(await exists(tpl.id), false);
  });

  test('every template route needs a key', async () => {
    const id = '0190a6c8-0000-7000-8000-000000000000';
    for (const [method, url] of [
      ['GET', '/public/v1/email/templates'],
      ['POST', '/public/v1/email/templates'],
      ['GET', `/public/v1/email/templates/${id}`],
      ['DELETE', `/public/v1/email/templates/${id}`],
    ] as const) {
      const res = await t.app.inject({ method, url, payload: method === 'POST' ? { name: 'x', content: 'x', content_type: 'html' } : undefined });
      assert.equal(res.statusCode, 401, `${method} ${url}`);
    }
  });

  test('rendering sees only the variables given, never prototype properties', async () => {
    const out = await renderTemplate('[{{ contact.constructor }}|{{ contact.toString }}|{{ contact.__proto__ }}|{{ contact.first_name }}]', {
      contact: { first_name: 'Ada' },
    });
    assert.equal(out, '[|||Ada]');
  });
});
