// Team isolation matrix, generated from the app's route table (the router's
// own listing, so routes hidden from the OpenAPI document count too), for the
// API (team by API key) and the dashboard (team by signed-in session): for
// every route with an id in its path, team B using team A's real ids gets 404
// and A's rows are unchanged; for every list route and page, B's answer holds
// none of A's ids. A route whose path parameter has no known id source
// (idKindOf in test/fuzz/world.ts) or whose body has no entry in bodyFor fails
// the test, so a new route cannot be forgotten.
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
  '/u/c/:team/:ref/:sig': 'signed link over (team, contact); the team is part of what is signed (test/ops/retention.test.ts)',
  '/u/a/:team/:ref/:sig': 'signed link over (team, address); the team is part of what is signed (test/ops/retention.test.ts)',
  '/assets/:name': 'static dashboard files, the same for everyone',
  '/inbound/:provider/:token': "a provider's event URL: the unguessable token names the team's webhook (test/inbound/provider-webhooks.test.ts)",
};

const isApi = (r: Route) => r.path.startsWith('/public/v1/');
/** Changes that make the row unusable afterwards: checked last, each on an id of its own. */
const isDestructive = (r: Route) => r.method === 'DELETE' || (r.method === 'POST' && /\/(delete|revoke|erase)$/.test(r.path));

/** A valid body (API) or form (dashboard) for each route that takes one, so the request gets past validation to the lookup. */
function bodyFor(route: Route, b: Team, world: World): Record<string, unknown> | undefined {
  const key = `${route.method} ${route.path}`;
  const bodies: Record<string, Record<string, unknown>> = {
    'PATCH /public/v1/webhooks/:id': { description: 'changed by team B', is_enabled: false },
    'PATCH /public/v1/email/templates/:id': { name: 'changed by team B' },
    'PATCH /public/v1/email/campaigns/:id': { name: 'changed by team B' },
    'PATCH /public/v1/email/mail-accounts/:id': { from_name: 'changed by team B' },
    'PATCH /public/v1/email/contacts/:id': { first_name: 'changed by team B' },
    'POST /public/v1/webhooks/:id/recover': { since: new Date(Date.now() - 86_400_000).toISOString() },
    'POST /public/v1/email/campaigns/:id/submit': { email: b.emails[0], idempotency_key: 'b-cross-team' },
    'PUT /public/v1/email/mail-accounts/:id/imap': { host: '127.0.0.1', port: 143, security: 'none', user: 'b', password: 'changed by team B' },
    'POST /webhooks/:id/edit': { url: world.webhookUrls[0], events: 'email.sent', description: 'changed by team B' },
    'POST /public/v1/email/mail-accounts/:id/dkim': { algorithm: 'ed25519', selector: 'by-team-b' },
    'POST /public/v1/email/mail-accounts/:id/dkim/:key_id/activate': { force: true },
    'POST /mail-accounts/:id/dkim': { algorithm: 'ed25519', selector: 'by-team-b' },
    'POST /mail-accounts/:id/dkim/:key_id/activate': { force: 'on' },
  };
  if (key in bodies) return bodies[key];
  if (!isApi(route)) return route.method === 'POST' ? {} : undefined; // dashboard actions: the session's CSRF token only
  if (['POST', 'PATCH', 'PUT'].includes(route.method) && !/\/(start|stop|cancel|enable|disable|resend)$/.test(route.path)) {
    throw new Error(`no valid body for ${key}: add one to bodyFor in test/security/isolation.test.ts`);
  }
  return undefined;
}

/** The ids each route is tried with: the first of their kind, except that every destructive route gets its own, from the end. */
function assignIds(routes: Route[], owner: Team): Map<Route, string> {
  const used = new Map<string, number>();
  const urls = new Map<Route, string>();
  for (const route of routes) {
    let url = route.path;
    for (const p of route.params) {
      const kind = idKindOf(route.path, p);
      const ids = owner.ids[kind];
      let index = 0;
      if (isDestructive(route) && p === route.params.at(-1)) {
        index = ids.length - 1 - (used.get(kind) ?? 0);
        used.set(kind, (used.get(kind) ?? 0) + 1);
      }
      assert.ok(ids[index], `team has too few ${kind} rows for ${route.method} ${route.path}`);
      url = url.replace(`:${p}`, ids[index]!);
    }
    urls.set(route, url);
  }
  return urls;
}

/** Every row of every table with a team_id column (found in the catalog, so new tables count), for one team. */
async function snapshot(world: World, teamId: string): Promise<Record<string, unknown[]>> {
  const db = world.t.database.db;
  const { rows: tables } = await sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.columns
     WHERE table_schema = 'public' AND column_name = 'team_id'
     ORDER BY table_name`.execute(db);
  const out: Record<string, unknown[]> = {};
  for (const { table_name } of tables) {
    const { rows } = await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(table_name)} WHERE team_id = ${teamId} ORDER BY 1`.execute(db);
    // A key's last use is written in the background by the team's own requests.
    out[table_name] = rows.map((row) => {
      const copy = { ...row };
      delete copy.last_used_at;
      return copy;
    });
  }
  return out;
}

describe('team isolation matrix (generated from the route table)', () => {
  let world: World;
  let all: Route[];
  let routes: Route[];
  before(async () => {
    world = await createWorld();
    all = routeTable(world.app);
    routes = all.filter((r) => isApi(r));
  });
  after(() => world.close());

  const inject = (team: Team, method: string, url: string, body?: unknown) =>
    world.app.inject({ method: method as 'GET', url, headers: { 'x-api-key': team.key }, ...(body === undefined ? {} : { payload: body as object }) });
  /** The API with the team's key, or a dashboard page with the team's signed-in session (forms carry its CSRF token). */
  const as = (team: Team, route: Route, url: string, body?: Record<string, unknown>) => {
    if (isApi(route)) return inject(team, route.method, url, body);
    if (route.method === 'GET') return team.session.get(url);
    return team.session.post(url, Object.fromEntries(Object.entries(body ?? {}).map(([k, v]) => [k, String(v)])));
  };
  /** Routes outside /public/v1 that take an id and are not in NOT_TEAM_ROUTES: dashboard pages, scoped by session. */
  const dashboardWithIds = () => all.filter((r) => !isApi(r) && r.params.length > 0 && !(r.path in NOT_TEAM_ROUTES) && !r.path.startsWith('/docs'));

  test('the route table is complete: every /public/v1 route is found, every path parameter has an id source', () => {
    assert.ok(routes.length >= 30, `only ${routes.length} routes found in printRoutes`);
    const documented = Object.entries((world.app.swagger() as { paths: Record<string, object> }).paths).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${p.replace(/\{([^}]+)\}/g, ':$1')}`),
    );
    for (const d of documented.filter((d) => d.includes(' /public/v1/'))) {
      assert.ok(routes.some((r) => `${r.method} ${r.path}` === d), `${d} is in the OpenAPI document but not found in the route table`);
    }
    // Throws, naming the route, when a parameter has no id source: every route
    // with an id is either team-scoped (API or dashboard) or in NOT_TEAM_ROUTES.
    for (const r of [...routes, ...dashboardWithIds()]) for (const p of r.params) idKindOf(r.path, p);
    assert.ok(dashboardWithIds().length >= 10, `only ${dashboardWithIds().length} dashboard routes with ids`);
  });

  // This and the lists run before the matrix, whose check as team A deletes some of A's rows.
  test("ids and addresses in bodies: B cannot simulate A's webhook, build on A's template or mail account, or touch A's contacts", async () => {
    const { a, b } = world;
    const before = await snapshot(world, a.teamId);
    // Contacts are named by address, per team: B writing A's addresses makes or changes B's own rows only.
    for (const [url, body] of [
      ['/email/contacts/upsert', { email: a.emails[0], first_name: 'Set by B' }],
      ['/email/contacts/bulk-upsert', { contacts: [{ email: a.emails[1], last_name: 'B' }] }],
      ['/email/contacts/unsubscribe', { email: a.emails[0], reason: 'B says so' }],
      ['/email/contacts/bulk-unsubscribe', { emails: [a.emails[1]] }],
      ['/email/suppressions', { suppressions: [{ email: a.emails[0], reason: 'complained' }, { email: a.emails[1] }] }],
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
    // Transactional e-mail: A's template, account and contact are unknown to B, one by one and in a batch.
    const borrowed = { template_id: a.ids.template[0], mail_account_id: a.ids.mailAccount[0], contact_id: a.ids.contact[0], to_email: b.emails[0] };
    const submit = await inject(b, 'POST', '/public/v1/email/emails/submit', borrowed);
    assert.equal(submit.statusCode, 422, submit.body);
    assert.deepEqual(submit.json().error.details.map((d: { field: string }) => d.field).sort(), ['contact_id', 'mail_account_id', 'template_id']);
    const batch = await inject(b, 'POST', '/public/v1/email/emails/batch', { emails: [borrowed] });
    assert.equal(batch.statusCode, 422, batch.body);
    assert.equal(batch.json().error.details.length, 3);
  });
  test("every list route and page: team B's answer holds none of team A's ids or team id; A's own holds some", async () => {
    const { a, b } = world;
    // A lookup by address is not a list: team B's lookup of A's addresses finds B's own contacts (covered by test/contacts/manage.test.ts).
    const lists = all.filter((r) => r.method === 'GET' && r.params.length === 0 && !r.path.startsWith('/docs') && !r.path.endsWith('/by-email'));
    assert.ok(lists.length >= 12, `only ${lists.length} list routes and pages`);
    // Not the e-mail addresses: B has made contacts with A's addresses above (its own rows).
    const markersOf = (t: Team) => [t.teamId, ...Object.values(t.ids).flat()];
    // Where A's own answer must show A's rows, or the check on B's proves nothing.
    const mustShow = new Set(['/email/contacts/unsubscribes', '/email/templates', '/email/mail-accounts', '/email/campaigns', '/webhooks', '/email/suppressions'].map((p) => `/public/v1${p}`));
    for (const p of ['/campaigns', '/contacts', '/templates', '/mail-accounts', '/webhooks', '/developer/api-keys', '/suppressions']) mustShow.add(p);
    for (const p of mustShow) assert.ok(lists.some((r) => r.path === p), `${p} is not in the route table any more: update mustShow`);
    for (const route of lists) {
      for (const query of ['', '?per_page=100', '?per_page=100&search=alpha', '?per_page=100&search=example', '?q=alpha&page=1']) {
        const asB = await as(b, route, `${route.path}${query}`);
        assert.ok(asB.statusCode < 500, `${route.path}${query} as B: ${asB.statusCode}`);
        // A route that is not paged (the stats) refuses the paging parameters by name; plain, it answers.
        const refusedParams = asB.statusCode === 422 && (JSON.parse(asB.body).error?.details ?? [])
          .every((d: { message: string }) => d.message === 'is not an allowed field');
        if (isApi(route)) assert.ok(asB.statusCode === 200 || query.startsWith('?q') || (query !== '' && refusedParams), `${route.path}${query} as B: ${asB.statusCode} ${asB.body.slice(0, 300)}`);
        for (const m of markersOf(a)) assert.ok(!asB.body.includes(m), `${route.path}${query} as team B shows team A's ${m}`);
      }
      if (mustShow.has(route.path)) {
        const asA = await as(a, route, `${route.path}?per_page=100`);
        assert.ok(markersOf(a).some((m) => asA.body.includes(m)), `${route.path} as team A shows none of A's rows: the check above proves nothing`);
      }
    }
  });

  test("every route with an id, API and dashboard: team B with team A's real ids gets 404, and A's rows are unchanged", async () => {
    const { a, b } = world;
    const withIds = [...routes.filter((r) => r.params.length > 0), ...dashboardWithIds()];
    assert.ok(withIds.length >= 30, `only ${withIds.length} routes with ids`);
    const before = await snapshot(world, a.teamId);
    for (const table of ['api_keys', 'contacts', 'templates', 'mail_accounts', 'campaigns', 'campaign_sends', 'campaign_decisions', 'events', 'webhooks', 'webhook_deliveries', 'email_send_log', 'dashboard_users']) {
      assert.ok(before[table]?.length, `team A has no ${table} rows to protect`);
    }
    // Destructive routes last, so every other route still finds A's rows when checked as A below.
    const ordered = [...withIds].sort((x, y) => Number(isDestructive(x)) - Number(isDestructive(y)));
    const urls = assignIds(ordered, a);
    for (const route of ordered) {
      const res = await as(b, route, urls.get(route)!, bodyFor(route, b, world));
      const name = `${route.method} ${route.path}`;
      assert.equal(res.statusCode, 404, `${name} as team B: ${res.statusCode} ${res.body.slice(0, 300)}`);
      if (isApi(route)) assert.equal(JSON.parse(res.body).error.code, 'NOT_FOUND', name);
      for (const id of Object.values(a.ids).flat()) assert.ok(!res.body.includes(id), `${name} as B leaks ${id}`);
    }
    assert.deepEqual(await snapshot(world, a.teamId), before, "team B's requests changed team A's rows");

    // Not vacuous: the same requests as A find the rows (anything but 404).
    for (const route of ordered) {
      const res = await as(a, route, urls.get(route)!, bodyFor(route, a, world));
      const name = `${route.method} ${route.path}`;
      assert.notEqual(res.statusCode, 404, `${name} as team A: ${res.body.slice(0, 300)}`);
      assert.ok(res.statusCode < 500, `${name} as team A: ${res.statusCode} ${res.body.slice(0, 300)}`);
    }
  });
});
