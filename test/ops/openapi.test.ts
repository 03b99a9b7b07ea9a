import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { buildTestApp, type TestApp } from '../helpers.ts';

describe('OpenAPI document', () => {
  let t: TestApp;
  let doc: any;
  before(async () => {
    t = await buildTestApp();
    const res = await t.app.inject({ url: '/public/v1/openapi.json' });
    assert.equal(res.statusCode, 200);
    doc = res.json();
  });
  after(() => t.close());

  test('is a valid OpenAPI 3.1 document (strict validator)', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(doc));
    assert.equal(doc.openapi, '3.1.0');
    assert.deepEqual(result.errors ?? [], [], JSON.stringify(result.errors, null, 2));
    assert.equal(result.valid, true);
  });

  test('declares the x-api-key security scheme and applies it to the API', () => {
    assert.deepEqual(doc.components.securitySchemes.apiKey, { type: 'apiKey', in: 'header', name: 'x-api-key' });
    assert.deepEqual(doc.security, [{ apiKey: [] }]);
  });

  test('every /public/v1 operation documents its success and error responses', () => {
    const ops = Object.entries(doc.paths as Record<string, Record<string, any>>).filter(([p]) => p.startsWith('/public/v1/'));
    assert.ok(ops.length >= 1);
    for (const [path, methods] of ops) {
      for (const [method, op] of Object.entries(methods)) {
        const codes = Object.keys(op.responses);
        assert.ok(codes.some((c) => c.startsWith('2')), `${method} ${path} has a 2xx response`);
        for (const code of ['401', '422', '429', '500']) {
          assert.ok(codes.includes(code), `${method} ${path} documents ${code}`);
          const schema = op.responses[code].content['application/json'].schema;
          assert.deepEqual(schema.required, ['ok', 'error'], `${method} ${path} ${code} uses the error envelope`);
        }
      }
    }
  });

  test('lists the public API only: no dashboard page, asset or sign-in form', () => {
    const paths = Object.keys(doc.paths as Record<string, unknown>);
    const outside = paths.filter((p) => !p.startsWith('/public/v1/') && !['/healthz', '/readyz'].includes(p));
    assert.deepEqual(outside, []);
    assert.ok(paths.length >= 30, `only ${paths.length} paths`);
    // The dashboard still has its routes, in the table the contract fuzz reads.
    const table = t.app.dashboardRouteTable.map((r) => `${r.method} ${r.url}`);
    for (const route of ['GET /', 'GET /campaigns', 'POST /sign-in', 'GET /settings/team', 'POST /settings/team', 'GET /favicon.ico']) {
      assert.ok(table.includes(route), `${route} is not in the dashboard route table`);
    }
  });

  test('no description in the document points outside the repository', () => {
    const text = JSON.stringify(doc);
    for (const word of [['interface', 'md'].join('.'), 'decisions.md §', ['', 'work', 'shared'].join('/')]) assert.ok(!text.includes(word), word);
  });

  test('the API reference page is served at /docs', async () => {
    const res = await t.app.inject({ url: '/docs/' });
    assert.equal(res.statusCode, 200);
    assert.match(res.headers['content-type'] as string, /text\/html/);
  });
});
