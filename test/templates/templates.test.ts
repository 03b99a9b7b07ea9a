import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { renderTemplate } from '../../src/templates/render.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { captured } from '../lib/statements.ts';

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('templates: create, list, get, delete', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const create = (key: string, body: Record<string, unknown>) =>
    t.app.inject({ method: 'POST', url: '/public/v1/email/templates', headers: { 'x-api-key': key }, payload: body });
  const get = (key: string, url: string) => t.app.inject({ url, headers: { 'x-api-key': key } });

  test('create answers 201 with the whole template; alt_content derived, Liquid kept, subject null when absent', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const content = '<h1>Hello {{ contact.first_name | default: "there friend" }}</h1>\n<p>News.</p>\n<a href="{{ unsubscribe_url }}">Unsubscribe</a>';
    const res = await create(key, { name: '  Welcome  ', content, content_type: 'html' });
    assert.equal(res.statusCode, 201, res.body);
    const body = res.json();
    assert.equal(body.ok, true);
    const tpl = body.template;
    assert.deepEqual(Object.keys(tpl).sort(), [
      'alt_content', 'content', 'content_type', 'created_at', 'id', 'meta', 'name', 'scope', 'status', 'subject', 'team_id', 'updated_at', 'version',
    ]);
    assert.match(tpl.id, UUID);
    assert.equal(tpl.team_id, teamId);
    assert.equal(tpl.name, 'Welcome', 'name is stored trimmed');
    assert.equal(tpl.subject, null);
    assert.equal(tpl.content_type, 'html');
    assert.equal(tpl.scope, 'private');
    assert.equal(tpl.status, 'active');
    assert.deepEqual(tpl.meta, { json_schema: '', tags: [] });
    assert.equal(tpl.content, content);
    assert.match(tpl.created_at, ISO);
    assert.match(tpl.updated_at, ISO);
    // Derived plain text: no markup, heading not upper-cased (the Liquid would break), link target kept.
    assert.ok(!tpl.alt_content.includes('<'), tpl.alt_content);
    assert.match(tpl.alt_content, /Hello \{\{ contact\.first_name \| default: "there friend" \}\}/);
    assert.match(tpl.alt_content, /Unsubscribe \[\{\{ unsubscribe_url \}\}\]/);
    // ...and it renders.
    const text = await renderTemplate(tpl.alt_content, { contact: { first_name: 'Ada' }, unsubscribe_url: 'https://u.example/x' });
    assert.match(text, /Hello Ada/);
    assert.match(text, /\[https:\/\/u\.example\/x\]/);

    const row = await t.database.db.selectFrom('templates').selectAll().where('id', '=', tpl.id).executeTakeFirstOrThrow();
    assert.equal(row.team_id, teamId);
    assert.equal(row.content, content);
    assert.equal(row.alt_content, tpl.alt_content);
    assert.equal(row.created_at.toISOString(), tpl.created_at);
  });

  test('create keeps a given subject, alt_content and meta', async () => {
    const { key } = await makeTeam(t.database.db);
    const res = await create(key, {
      name: 'Receipt',
      content: '<p>Thanks, {{ contact.first_name }}</p>',
      content_type: 'html',
      subject: 'Your receipt, {{ contact.first_name | default: "friend" }}',
      alt_content: 'Thanks, {{ contact.first_name }} (plain)',
      meta: { json_schema: '{"type":"object"}', tags: ['billing', 'transactional'] },
    });
    assert.equal(res.statusCode, 201, res.body);
    const tpl = res.json().template;
    assert.equal(tpl.subject, 'Your receipt, {{ contact.first_name | default: "friend" }}');
    assert.equal(tpl.alt_content, 'Thanks, {{ contact.first_name }} (plain)');
    assert.deepEqual(tpl.meta, { json_schema: '{"type":"object"}', tags: ['billing', 'transactional'] });
    assert.equal(await renderTemplate(tpl.subject, { contact: {} }), 'Your receipt, friend');
  });

  test('get returns the template with its content', async () => {
    const { key } = await makeTeam(t.database.db);
    const created = (await create(key, { name: 'A', content: '<p>a</p>', content_type: 'html', subject: 'S' })).json().template;
    const res = await get(key, `/public/v1/email/templates/${created.id}`);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, template: created });
    // An upper-case spelling of the same UUID names the same template.
    const upper = await get(key, `/public/v1/email/templates/${created.id.toUpperCase()}`);
    assert.equal(upper.statusCode, 200);
    assert.equal(upper.json().template.id, created.id);
  });

  test('create and PATCH answer the content they wrote without reading it back from the database; GET agrees', async () => {
    const { key } = await makeTeam(t.database.db);
    const content = `<p>{{ contact.first_name }} ${'Héllo, a long paragraph of plain text. '.repeat(10_000)}</p>`;
    let res: Awaited<ReturnType<typeof create>> | undefined;
    const inserts = await captured(/insert into "templates"/i, async () => {
      res = await create(key, { name: 'Big', content, content_type: 'html' });
    });
    assert.equal(res!.statusCode, 201, res!.body.slice(0, 300));
    const created = res!.json().template;
    assert.equal(created.content, content);
    let patched: Awaited<ReturnType<typeof create>> | undefined;
    const updates = await captured(/update "templates"/i, async () => {
      patched = await t.app.inject({
        method: 'PATCH', url: `/public/v1/email/templates/${created.id}`, headers: { 'x-api-key': key }, payload: { content: content + '<p>more</p>' },
      });
    });
    assert.equal(patched!.statusCode, 200, patched!.body.slice(0, 300));
    const updated = patched!.json().template;
    assert.equal(updated.content, content + '<p>more</p>');
    assert.deepEqual((await get(key, `/public/v1/email/templates/${created.id}`)).json(), { ok: true, template: updated });
    assert.equal(inserts.length, 1);
    assert.equal(updates.length, 1);
    for (const { text } of [...inserts, ...updates]) {
      const returning = text.slice(text.toLowerCase().lastIndexOf('returning'));
      assert.ok(returning.startsWith('returning') && !/"(alt_)?content"/.test(returning), returning);
    }
  });

  test('list: newest first, string meta, content only with include[]=content', async () => {
    const { key } = await makeTeam(t.database.db);
    const ids: string[] = [];
    for (const name of ['first', 'second', 'third']) {
      ids.push((await create(key, { name, content: `<p>${name}</p>`, content_type: 'html' })).json().template.id);
    }
    const res = await get(key, '/public/v1/email/templates');
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.ok, true);
    assert.deepEqual(body.meta, { current_page: '1', per_page: 20, total: '3', last_page: '1' });
    assert.deepEqual(body.templates.data.map((x: { id: string }) => x.id), [...ids].reverse());
    for (const item of body.templates.data) {
      assert.equal('content' in item, false);
      assert.equal('alt_content' in item, false);
      assert.equal(item.scope, 'private');
      assert.match(item.created_at, ISO);
    }

    const withContent = (await get(key, '/public/v1/email/templates?include[]=content')).json();
    assert.deepEqual(withContent.templates.data.map((x: { content: string }) => x.content), ['<p>third</p>', '<p>second</p>', '<p>first</p>']);
    assert.deepEqual(withContent.templates.data.map((x: { alt_content: string }) => x.alt_content), ['third', 'second', 'first']);
    // `include=content` (without brackets) means the same.
    const alias = (await get(key, '/public/v1/email/templates?include=content')).json();
    assert.equal(alias.templates.data[0].content, '<p>third</p>');
  });

  test('list pages through the templates', async () => {
    const { key } = await makeTeam(t.database.db);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await create(key, { name: `t${i}`, content: '<p>x</p>', content_type: 'html' })).json().template.id);
    const newest = [...ids].reverse();
    const p1 = (await get(key, '/public/v1/email/templates?per_page=2')).json();
    const p3 = (await get(key, '/public/v1/email/templates?per_page=2&page=3')).json();
    const p4 = (await get(key, '/public/v1/email/templates?per_page=2&page=4')).json();
    assert.deepEqual(p1.meta, { current_page: '1', per_page: 2, total: '5', last_page: '3' });
    assert.deepEqual(p1.templates.data.map((x: { id: string }) => x.id), newest.slice(0, 2));
    assert.deepEqual(p3.templates.data.map((x: { id: string }) => x.id), newest.slice(4));
    assert.deepEqual(p4.templates.data, []);
    assert.equal(p4.meta.current_page, '4');
    assert.equal(p4.meta.total, '5');
  });

  test('list search: case-insensitive substring of the name, LIKE wildcards taken literally', async () => {
    const { key } = await makeTeam(t.database.db);
    for (const name of ['Spring SALE', 'sale 100% off', 'Sale 1000 off', 'Newsletter', 'a_b', 'axb']) {
      assert.equal((await create(key, { name, content: '<p>x</p>', content_type: 'html' })).statusCode, 201);
    }
    const names = async (search: string) =>
      (await get(key, `/public/v1/email/templates?search=${encodeURIComponent(search)}`))
        .json()
        .templates.data.map((x: { name: string }) => x.name)
        .sort();
    assert.deepEqual(await names('sale'), ['Sale 1000 off', 'Spring SALE', 'sale 100% off']);
    assert.deepEqual(await names('100%'), ['sale 100% off']);
    assert.deepEqual(await names('a_b'), ['a_b']);
    assert.deepEqual(await names('nothing like it'), []);
    const meta = (await get(key, '/public/v1/email/templates?search=SALE')).json().meta;
    assert.equal(meta.total, '3');
  });

  test('archived templates are not listed', async () => {
    const { key } = await makeTeam(t.database.db);
    const a = (await create(key, { name: 'keep', content: '<p>x</p>', content_type: 'html' })).json().template;
    const b = (await create(key, { name: 'archive me', content: '<p>x</p>', content_type: 'html' })).json().template;
    await sql`UPDATE templates SET status = 'archived' WHERE id = ${b.id}`.execute(t.database.db);
    const list = (await get(key, '/public/v1/email/templates')).json();
    assert.deepEqual(list.templates.data.map((x: { id: string }) => x.id), [a.id]);
    assert.equal(list.meta.total, '1');
  });

  test('delete answers {ok: true} and removes the row', async () => {
    const { key } = await makeTeam(t.database.db);
    const tpl = (await create(key, { name: 'bye', content: '<p>x</p>', content_type: 'html' })).json().template;
    const res = await t.app.inject({ method: 'DELETE', url: `/public/v1/email/templates/${tpl.id}`, headers: { 'x-api-key': key } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true });
    const row = await t.database.db.selectFrom('templates').select('id').where('id', '=', tpl.id).executeTakeFirst();
    assert.equal(row, undefined);
    assert.equal((await get(key, `/public/v1/email/templates/${tpl.id}`)).statusCode, 404);
    const again = await t.app.inject({ method: 'DELETE', url: `/public/v1/email/templates/${tpl.id}`, headers: { 'x-api-key': key } });
    assert.equal(again.statusCode, 404);
  });

  test('the template routes are in the OpenAPI document', async () => {
    const doc = (await t.app.inject({ url: '/public/v1/openapi.json' })).json();
    const paths = doc.paths as Record<string, Record<string, { tags: string[]; responses: Record<string, unknown> }>>;
    assert.ok(paths['/public/v1/email/templates'].post.responses['201']);
    assert.ok(paths['/public/v1/email/templates'].get.responses['200']);
    assert.ok(paths['/public/v1/email/templates/{id}'].get.responses['404']);
    assert.ok(paths['/public/v1/email/templates/{id}'].delete.responses['409']);
    assert.deepEqual(paths['/public/v1/email/templates'].post.tags, ['templates']);
  });
});
