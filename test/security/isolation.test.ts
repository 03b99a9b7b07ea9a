// Team isolation matrix, generated from the app's route table (the router's
// own listing, so routes hidden from the OpenAPI document count too): for
// every /public/v1 route with an id in its path, team B using team A's real
// ids gets 404 NOT_FOUND and A's rows are unchanged; for every list route,
// B's answer holds none of A's ids. A route whose path parameter has no known
// id source (idKindOf in test/fuzz/world.ts) or whose body has no entry in
// BODIES fails the test, so a new route cannot be forgotten.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { createWorld, idKindOf, type Team, type World } from '../fuzz/world.ts';

type Route = { method: string; path: string; params: string[] };

/** Every route of the app, from the router's tree listing (printRoutes with full segments). */
function routeTable(app: FastifyInstance): Route[] {
  const routes: Route[] = [];
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^((?:│ {3}| {4})*)(?:├── |└── )(.+?)(?: \(([^)]*)\))?$/.exec(line);
    if (!m) continue;
    const depth = m[1]!.length / 4;
    const path = (stack[depth - 1] ?? '') + m[2];
    stack[depth] = path;
    stack.length = depth + 1;
    for (const method of (m[3] ?? '').split(',').map((x) => x.trim()).filter(Boolean)) {
      if (method === 'HEAD') continue; // the same handler as GET
      routes.push({ method, path, params: [...path.matchAll(/:([A-Za-z_]+)/g)].map((p) => p[1]!) });
    }
  }
  return routes;
}

// Routes with path parameters that are not team-scoped by an API key; each says why.
const NOT_TEAM_ROUTES: Record<string, string> = {
  '/t/o/:id/:file': 'signed link: the HMAC over the send id is the access check (test/tracking/security.test.ts)',
  '/t/c/:id/:sig': 'signed link (test/tracking/security.test.ts, test/mail/tracking-links.test.ts)',
  '/t/h/:id/:sig': 'signed link (test/tracking/security.test.ts)',
  '/u/:id/:sig': 'signed link (test/tracking/unsubscribe.test.ts, test/tracking/security.test.ts)',
};

/** A valid body for each route that takes one, so the request gets past validation to the lookup. */
function bodyFor(route: Route, b: Team): unknown {
  const key = `${route.method} ${route.path}`;
  const bodies: Record<string, unknown> = {
    'PATCH /public/v1/webhooks/:id': { description: 'changed by team B', is_enabled: false },
    'POST /public/v1/email/campaigns/:id/submit': { email: b.emails[0], idempotency_key: 'b-cross-team' },
  };
  if (key in bodies) return bodies[key];
  if (['POST', 'PATCH', 'PUT'].includes(route.method) && !/\/(start|stop|enable|disable|resend)$/.test(route.path)) {
    throw new Error(`no valid body for ${key}: add one to bodyFor in test/security/isolation.test.ts`);
  }
  return undefined;
}

function urlFor(route: Route, owner: Team): string {
  let url = route.path;
  for (const p of route.params) {
    const ids = owner.ids[idKindOf(route.path, p)];
    assert.ok(ids.length, `team has no ${idKindOf(route.path, p)} to use in ${route.path}`);
    url = url.replace(`:${p}`, ids[0]!);
  }
  return url;
}

/** Every row of every table with a team_id column (found in the catalog, so new tables count), for one team. */
async function snapshot(world: World, teamId: string): Promise<Record<string, unknown[]>> {
  const db = world.t.database.db;
  const { rows: tables } = await sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.columns
     WHERE table_schema = 'public' AND column_name = 'team_id' AND table_name <> 'api_keys'
     ORDER BY table_name`.execute(db);
  const out: Record<string, unknown[]> = {};
  for (const { table_name } of tables) {
    const { rows } = await sql`SELECT * FROM ${sql.table(table_name)} WHERE team_id = ${teamId} ORDER BY 1`.execute(db);
    out[table_name] = rows;
  }
  return out;
}

describe('team isolation matrix (generated from the route table)', () => {
  let world: World;
  let routes: Route[];
  before(async () => {
    world = await createWorld();
    routes = routeTable(world.app).filter((r) => r.path.startsWith('/public/v1/'));
  });
  after(() => world.close());

  const inject = (team: Team, method: string, url: string, body?: unknown) =>
    world.app.inject({ method: method as 'GET', url, headers: { 'x-api-key': team.key }, ...(body === undefined ? {} : { payload: body as object }) });

  test('the route table is complete: every /public/v1 route is found, every path parameter has an id source', () => {
    assert.ok(routes.length >= 30, `only ${routes.length} routes found in printRoutes`);
    const documented = Object.entries((world.app.swagger() as { paths: Record<string, object> }).paths).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${p.replace(/\{([^}]+)\}/g, ':$1')}`),
    );
    for (const d of documented.filter((d) => d.includes(' /public/v1/'))) {
      assert.ok(routes.some((r) => `${r.method} ${r.path}` === d), `${d} is in the OpenAPI document but not found in the route table`);
    }
    for (const r of routeTable(world.app).filter((r) => r.params.length && !r.path.startsWith('/public/v1/'))) {
      assert.ok(r.path in NOT_TEAM_ROUTES || r.path.startsWith('/docs'), `${r.method} ${r.path} takes an id outside /public/v1: say in NOT_TEAM_ROUTES how it is protected`);
    }
    // Throws, naming the route, when a parameter has no id source.
    for (const r of routes) for (const p of r.params) idKindOf(r.path, p);
  });

  // Runs before the matrix, whose check as team A deletes A's first template and webhook.
  test("ids and addresses in bodies: B cannot simulate A's webhook, build on A's template or mail account, or touch A's contacts", async () => {
    const { a, b } = world;
    const before = await snapshot(world, a.teamId);
    // Contacts are named by address, per team: B writing A's addresses makes or changes B's own rows only.
    for (const [url, body] of [
      ['/email/contacts/upsert', { email: a.emails[0], first_name: 'Set by B' }],
      ['/email/contacts/bulk-upsert', { contacts: [{ email: a.emails[1], last_name: 'B' }] }],
      ['/email/contacts/unsubscribe', { email: a.emails[0], reason: 'B says so' }],
      ['/email/contacts/bulk-unsubscribe', { emails: [a.emails[1]] }],
      ['/email/events', { event_name: 'sale.created', email: a.emails[0], payload: { amount: 5, currency: 'EUR' } }],
    ] as const) {
      const res = await inject(b, 'POST', `/public/v1${url}`, body);
      assert.ok(res.statusCode < 300, `${url}: ${res.statusCode} ${res.body}`);
      for (const id of [a.teamId, ...Object.values(a.ids).flat()]) assert.ok(!res.body.includes(id), `${url} as B shows A's ${id}`);
    }
    assert.deepEqual(await snapshot(world, a.teamId), before, "B's writes by address changed team A's rows");

    const sim = await inject(b, 'POST', '/public/v1/webhooks/simulate', { webhook_id: a.ids.webhook[0], event: 'email.sent' });
    assert.equal(sim.statusCode, 404, sim.body);
    assert.equal((await inject(a, 'POST', '/public/v1/webhooks/simulate', { webhook_id: a.ids.webhook[0], event: 'email.sent' })).statusCode, 200);
    const campaign = await inject(b, 'POST', '/public/v1/email/campaigns', {
      name: 'borrowed', template_ids: [a.ids.template[0]], mail_account_ids: [a.ids.mailAccount[0]], events: ['contact.saved'],
    });
    assert.equal(campaign.statusCode, 422, campaign.body);
    assert.deepEqual(campaign.json().error.details.map((d: { field: string }) => d.field).sort(), ['mail_account_ids[0]', 'template_ids[0]']);
  });
  test("every route with an id: team B with team A's real ids gets 404 NOT_FOUND, and A's rows are unchanged", async () => {
    const { a, b } = world;
    const withIds = routes.filter((r) => r.params.length > 0);
    assert.ok(withIds.length >= 15, `only ${withIds.length} routes with ids`);
    const before = await snapshot(world, a.teamId);
    assert.ok(Object.keys(before).length >= 10, `team-scoped tables: ${Object.keys(before)}`);
    for (const [table, rows] of Object.entries(before)) {
      if (!['leads', 'sales', 'tracking_hits', 'campaign_rotation'].includes(table)) assert.ok(rows.length > 0, `team A has no ${table} rows to protect`);
    }
    // Deletes last, so every other route still finds A's rows when checked as A below.
    const ordered = [...withIds].sort((x, y) => Number(x.method === 'DELETE') - Number(y.method === 'DELETE'));
    for (const route of ordered) {
      const res = await inject(b, route.method, urlFor(route, a), bodyFor(route, b));
      assert.equal(res.statusCode, 404, `${route.method} ${route.path} as team B: ${res.statusCode} ${res.body.slice(0, 300)}`);
      assert.equal(res.json().error.code, 'NOT_FOUND', `${route.method} ${route.path}`);
      for (const id of Object.values(a.ids).flat()) assert.ok(!res.body.includes(id), `${route.method} ${route.path} as B leaks ${id}`);
    }
    assert.deepEqual(await snapshot(world, a.teamId), before, "team B's requests changed team A's rows");

    // Not vacuous: the same requests as A find the rows (anything but 404).
    for (const route of ordered) {
      const res = await inject(a, route.method, urlFor(route, a), bodyFor(route, a));
      assert.notEqual(res.statusCode, 404, `${route.method} ${route.path} as team A: ${res.body.slice(0, 300)}`);
      assert.ok(res.statusCode < 500, `${route.method} ${route.path} as team A: ${res.statusCode} ${res.body.slice(0, 300)}`);
    }
  });

  test("every list route: team B's answer holds none of team A's ids or team id; A's own holds some", async () => {
    const { a, b } = world;
    const lists = routes.filter((r) => r.method === 'GET' && r.params.length === 0);
    assert.ok(lists.length >= 5, `only ${lists.length} list routes`);
    // Not the e-mail addresses: B has made contacts with A's addresses above (its own rows).
    const markersOf = (t: Team) => [t.teamId, ...Object.values(t.ids).flat()];
    for (const route of lists) {
      for (const query of ['?per_page=100', '?per_page=100&search=alpha', '?per_page=100&search=example']) {
        const asB = await inject(b, 'GET', `${route.path}${query}`);
        assert.equal(asB.statusCode, 200, `${route.path}${query} as B: ${asB.body.slice(0, 300)}`);
        for (const m of markersOf(a)) assert.ok(!asB.body.includes(m), `${route.path}${query} as team B lists team A's ${m}`);
      }
      const asA = await inject(a, 'GET', `${route.path}?per_page=100`);
      // ping answers {ok: true}; the OpenAPI document is the public contract, the same for everyone.
      if (route.path !== '/public/v1/ping' && route.path !== '/public/v1/openapi.json') {
        assert.ok(markersOf(a).some((m) => asA.body.includes(m)), `${route.path} as team A shows none of A's rows: the check above proves nothing`);
      }
    }
  });
});
