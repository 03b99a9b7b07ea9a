// docs/api.md names every public route: each operation of openapi.json (the
// server's own route table for /public/v1) must appear in its route index as
// `METHOD /path`, and the index names no route that does not exist, so the
// page cannot fall behind a merge again.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers.ts';

const apiMd = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'api.md'), 'utf8');
const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

describe('docs/api.md and the route table', () => {
  let t: TestApp;
  let routes: string[];
  before(async () => {
    t = await buildTestApp();
    const doc = (await t.app.inject({ url: '/public/v1/openapi.json' })).json() as { paths: Record<string, Record<string, unknown>> };
    routes = Object.entries(doc.paths)
      .filter(([p]) => p.startsWith('/public/v1/'))
      .flatMap(([p, ops]) => Object.keys(ops).filter((m) => METHODS.includes(m)).map((m) => `${m.toUpperCase()} ${p.slice('/public/v1'.length)}`));
  });
  after(() => t.close());

  const index = () => {
    const start = apiMd.indexOf('## Route index');
    assert.ok(start >= 0, 'docs/api.md has a "Route index" section');
    const end = apiMd.indexOf('\n## ', start + 1);
    const section = apiMd.slice(start, end < 0 ? undefined : end);
    return [...section.matchAll(/`((?:GET|POST|PUT|PATCH|DELETE) \/[^`\s]*)`/g)].map((m) => m[1]!);
  };

  test('every public route of openapi.json is in the route index', () => {
    assert.ok(routes.length > 30, `${routes.length} routes`);
    const listed = new Set(index());
    const missing = routes.filter((r) => !listed.has(r));
    assert.deepEqual(missing, [], `not in docs/api.md's route index:\n${missing.join('\n')}`);
  });

  test('the route index names only routes that exist', () => {
    const known = new Set(routes);
    const stale = index().filter((r) => !known.has(r));
    assert.deepEqual(stale, [], `in docs/api.md but not a route:\n${stale.join('\n')}`);
  });
});
