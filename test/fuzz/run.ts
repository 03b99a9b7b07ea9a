// The contract fuzz itself: every operation of the OpenAPI document (plus the
// public tracking routes, which it hides) gets fast-check-generated requests
// through app.inject. The property: every answer is 2xx, 3xx (tracking
// redirect) or 4xx, a 4xx from the API is the error envelope of docs/api.md
// with the status its code maps to, nothing is 5xx, nothing takes longer than
// the timeout, and the app still answers a ping after every batch. Requests go
// one at a time first, then in concurrent bursts of writes.
import fc from 'fast-check';
import { ERROR_STATUS } from '../../src/http/errors.ts';
import { byText } from '../lib/order.ts';
import { bodyValue, enc, encodeBody, NASTY_STRINGS, pathId, queryString, type Pools, type RawBody, type Schema } from './generate.ts';
import { dashboardRequest } from './dashboard.ts';
import { StallMeter } from './stall.ts';
import { idKindOf, type IdKind, type Team, type World } from './world.ts';

export type Operation = {
  id: string;
  method: string;
  /** OpenAPI style: /public/v1/webhooks/{id} */
  path: string;
  pathParams: string[];
  query: { name: string; schema: Schema }[];
  body?: Schema;
  tracking?: boolean;
};

export type Req = {
  op: string;
  method: string;
  url: string;
  headers: Record<string, string | string[]>;
  payload?: string | Buffer;
};

export type Stats = {
  seed: number; total: number; byStatus: Map<number, number>; byOperation: Map<string, Map<number, number>>; ms: number;
  /** Longest event-loop stall while a request was in flight (after the warm-up), ms, and the request then in flight. */
  maxStallMs: number; maxWallStallMs?: number; worstStall?: { ms: number; label: string };
};

export function operationsOf(doc: { paths: Record<string, Record<string, any>> }): Operation[] {
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const params: any[] = op.parameters ?? [];
      ops.push({
        id: `${method.toUpperCase()} ${path}`,
        method: method.toUpperCase(),
        path,
        pathParams: params.filter((p) => p.in === 'path').map((p) => p.name),
        query: params.filter((p) => p.in === 'query').map((p) => ({ name: p.name, schema: p.schema ?? {} })),
        body: op.requestBody?.content?.['application/json']?.schema,
      });
    }
  }
  return ops;
}

/**
 * The dashboard's routes, which openapi.json leaves out (it lists the public
 * API only), from the server's own route table: every page and form the
 * dashboard registers is fuzzed, new ones included, without a list kept here.
 */
export function dashboardOperationsOf(table: { method: string; url: string }[]): Operation[] {
  const seen = new Set<string>();
  const ops: Operation[] = [];
  for (const { method, url } of table) {
    const path = url.replace(/:([A-Za-z_]\w*)/g, '{$1}');
    const id = `${method} ${path}`;
    if (seen.has(id)) continue;
    seen.add(id);
    ops.push({ id, method, path, pathParams: [...url.matchAll(/:([A-Za-z_]\w*)/g)].map((m) => m[1]!), query: [] });
  }
  return ops;
}

/** Every operation the fuzz reaches: the OpenAPI document's and the dashboard's (tracking links apart). */
export function fuzzOperations(app: { swagger(): unknown; dashboardRouteTable: { method: string; url: string }[] }): Operation[] {
  return [...operationsOf(app.swagger() as never), ...dashboardOperationsOf(app.dashboardRouteTable)];
}

// The tracking routes are hidden from the document; their shapes are fixed.
export const TRACKING_OPS: Operation[] = [
  { id: 'GET /t/o/{id}/{sig}.gif', method: 'GET', path: '/t/o/{id}/{sig}', pathParams: [], query: [], tracking: true },
  { id: 'GET /t/c/{id}/{sig}', method: 'GET', path: '/t/c/{id}/{sig}', pathParams: [], query: [], tracking: true },
  { id: 'GET /t/h/{id}/{sig}', method: 'GET', path: '/t/h/{id}/{sig}', pathParams: [], query: [], tracking: true },
  { id: 'GET /u/{id}/{sig}', method: 'GET', path: '/u/{id}/{sig}', pathParams: [], query: [], tracking: true },
  { id: 'POST /u/{id}/{sig}', method: 'POST', path: '/u/{id}/{sig}', pathParams: [], query: [], tracking: true },
  ...(['c', 'a'] as const).flatMap((by) => (['GET', 'POST'] as const).map((method) => (
    { id: `${method} /u/${by}/{team}/{ref}/{sig}`, method, path: `/u/${by}/{team}/{ref}/{sig}`, pathParams: [], query: [], tracking: true }
  ))),
];

type Live = { created: Record<string, string[]> };

function allIds(team: Team, live: Live): string[] {
  return [...Object.values(team.ids).flat(), ...(live.created[team.teamId] ?? [])];
}

function apiRequest(world: World, op: Operation, live: Live): fc.Arbitrary<Req> {
  const team = fc.constantFrom(world.a, world.b);
  return team.chain((me) => {
    const other = me === world.a ? world.b : world.a;
    const mine = (kind: IdKind) => [...me.ids[kind], ...(live.created[`${me.teamId}:${kind}`] ?? [])];
    const pools: Pools = {
      emails: [...me.emails, ...other.emails],
      uuids: [...allIds(me, live), ...allIds(other, live)],
      urls: world.webhookUrls,
      idsByField: { template_ids: mine('template'), mail_account_ids: mine('mailAccount'), webhook_id: mine('webhook'), campaign_id: mine('campaign') },
    };
    const ids = op.pathParams.map((p) => {
      const kind = idKindOf(op.path, p);
      // Deletes take rows the fuzz made, so the seeded rows stay for everything else.
      const created = live.created[`${me.teamId}:${kind}`] ?? [];
      const own = op.method === 'DELETE' ? created : [...me.ids[kind], ...created];
      return pathId(own, [...other.ids[kind], ...allIds(me, live).filter((x) => !own.includes(x))]).map((v) => [p, v] as const);
    });
    const query = op.query.length ? queryString(op.query, pools) : fc.constantFrom('', '', '', 'unknown=1', 'page=%ZZ');
    const body: fc.Arbitrary<RawBody> = op.body ? encodeBody(bodyValue(op.body, pools)) : fc.constantFrom<RawBody>({}, {}, {}, { payload: '{}', contentType: 'application/json' }, { payload: 'x', contentType: 'text/plain' });
    const key = fc.oneof(
      { weight: 20, arbitrary: fc.constant<string | string[] | undefined>(me.key) },
      { weight: 1, arbitrary: fc.constantFrom<string | string[] | undefined>(undefined, '', 'nope', `${me.key}x`, me.key.toUpperCase(), ` ${me.key} `, [me.key, other.key], '\u00ff'.repeat(300)) },
    );
    const method = fc.oneof({ weight: 30, arbitrary: fc.constant(op.method) }, { weight: 1, arbitrary: fc.constantFrom('PUT', 'PATCH', 'DELETE', 'POST', 'OPTIONS', op.method === 'GET' ? 'HEAD' : 'GET') });
    return fc.record({ params: fc.tuple(...ids), query, body, key, method }).map(({ params, query: qs, body: b, key: k, method: m }) => {
      let path = op.path;
      for (const [name, value] of params) path = path.replace(`{${name}}`, value);
      const headers: Record<string, string | string[]> = {};
      if (k !== undefined) headers['x-api-key'] = k;
      if (b.contentType !== undefined) headers['content-type'] = b.contentType;
      const payload = guardBody(world, op, b.payload);
      return { op: op.id, method: m, url: qs ? `${path}?${qs}` : path, headers, ...(payload === undefined ? {} : { payload }) };
    });
  });
}

/**
 * Keeps the fuzz off the network: simulate is pointed only at local webhooks,
 * and a mail account with verify=true logs in to the local SMTP sink only.
 */
function guardBody(world: World, op: Operation, payload: string | Buffer | undefined): string | Buffer | undefined {
  if (payload === undefined) return payload;
  // Buffers (invalid UTF-8 bodies) are edited byte for byte through latin1.
  const text = typeof payload === 'string' ? payload : payload.toString('latin1');
  const back = (s: string) => (typeof payload === 'string' ? s : Buffer.from(s, 'latin1'));
  if (op.path.endsWith('/webhooks/simulate')) {
    let out = text;
    for (const id of world.remoteWebhookIds) out = out.replace(new RegExp(id, 'gi'), world.a.ids.webhook[0]!);
    return back(out);
  }
  if (op.path.endsWith('/email/mail-accounts') && /"verify"\s*:\s*true/.test(text)) {
    try {
      const body = JSON.parse(text);
      if (body && typeof body === 'object' && !Array.isArray(body)) {
        body.host = '127.0.0.1';
        body.port = world.smtpPort;
        return JSON.stringify(body);
      }
    } catch {
      // Not JSON: the parser rejects it before anything connects.
    }
    return '{}';
  }
  return payload;
}

function trackingRequest(world: World, op: Operation): fc.Arbitrary<Req> {
  const prefix = op.path.split('/{')[0]!;
  const signed = world.tracking.paths.filter((p) => p.startsWith(`${prefix}/`));
  const tampered = fc.tuple(fc.constantFrom(...signed), fc.nat(), fc.constantFrom('0', 'A', '-', '%00', '%ZZ', '..', 'a'.repeat(201))).map(([p, at, ch]) => {
    const [path, qs] = p.split('?');
    const i = (at % (path!.length - prefix.length - 1)) + prefix.length + 1;
    return `${path!.slice(0, i)}${ch}${path!.slice(i + 1)}${qs ? `?${qs}` : ''}`;
  });
  const made = fc.tuple(fc.oneof(fc.uuid(), fc.constantFrom(...world.tracking.sendIds), fc.constantFrom(...NASTY_STRINGS.filter(Boolean)).map(enc)), fc.string({ maxLength: 60 }).map(enc)).map(
    ([id, sig]) => `${prefix}/${id}/${sig || 'x'}${prefix === '/t/o' ? '.gif' : ''}`,
  );
  const clickQuery = fc.constantFrom('', `u=${enc(world.tracking.clickTarget)}`, 'u=javascript%3Aalert(1)', 'u=https%3A%2F%2Fevil.example', 'u=1&u=2', 'u[]=x', 'u=%ZZ');
  const url = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...signed) },
    { weight: 2, arbitrary: tampered },
    { weight: 2, arbitrary: fc.tuple(made, clickQuery).map(([p, q]) => (q && prefix === '/t/c' ? `${p}?${q}` : p)) },
  );
  const bodies = fc.constantFrom<RawBody>(
    {},
    { payload: 'List-Unsubscribe=One-Click', contentType: 'application/x-www-form-urlencoded' },
    { payload: '--b\r\ncontent-disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n--b--\r\n', contentType: 'multipart/form-data; boundary=b' },
    { payload: '{"List-Unsubscribe":"One-Click"}', contentType: 'application/json' },
    { payload: 'x'.repeat(20_000), contentType: 'application/x-www-form-urlencoded' },
    { payload: 'a=%ZZ&b', contentType: 'application/x-www-form-urlencoded' },
    { payload: Buffer.from([0xff, 0xfe, 0x00]), contentType: 'text/plain' },
  );
  const ua = fc.constantFrom<string | undefined>(undefined, 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/131.0.0.0', 'curl/8.0', 'a\u0001b', 'x'.repeat(5_000), '');
  const method = op.method === 'GET' ? fc.constantFrom('GET', 'GET', 'GET', 'HEAD', 'POST') : fc.constant('POST');
  return fc.record({ url, body: bodies, ua, method }).map(({ url: u, body, ua: agent, method: m }) => {
    const headers: Record<string, string> = {};
    if (agent !== undefined) headers['user-agent'] = agent;
    if (m === 'POST' && body.contentType) headers['content-type'] = body.contentType;
    return { op: op.id, method: m, url: u, headers, ...(m === 'POST' && body.payload !== undefined ? { payload: body.payload } : {}) };
  });
}

export function requestArbitrary(world: World, ops: Operation[], live: Live): fc.Arbitrary<Req> {
  return fc
    .constantFrom(...ops)
    .chain((op) => (op.tracking ? trackingRequest(world, op) : op.path.startsWith('/public/v1/') ? apiRequest(world, op, live) : dashboardRequest(world, op)));
}

/** Why an answer breaks the contract, or null. */
export function violation(req: Req, res: { statusCode: number; body: string; headers: Record<string, unknown> }): string | null {
  if (res.statusCode >= 500) return `${res.statusCode}: ${res.body.slice(0, 500)}`;
  if (res.statusCode < 200) return `status ${res.statusCode}`;
  // The error envelope is the API's; tracking links and dashboard pages answer HTML.
  if (!req.url.startsWith('/public/v1/') || req.method === 'HEAD') return null;
  if (res.statusCode >= 400) {
    let body: any;
    try {
      body = JSON.parse(res.body);
    } catch {
      return `${res.statusCode} without a JSON body: ${res.body.slice(0, 200)}`;
    }
    const e = body?.error;
    if (body?.ok !== false || typeof e?.code !== 'string' || typeof e?.message !== 'string') return `${res.statusCode} without the error envelope: ${res.body.slice(0, 300)}`;
    const expected = ERROR_STATUS[e.code as keyof typeof ERROR_STATUS];
    if (expected !== res.statusCode) return `${res.statusCode} with code ${e.code} (which maps to ${expected})`;
  }
  return null;
}

const COLLECTIONS: Record<string, IdKind> = {
  '/public/v1/email/templates': 'template',
  '/public/v1/email/mail-accounts': 'mailAccount',
  '/public/v1/email/campaigns': 'campaign',
  '/public/v1/webhooks': 'webhook',
  '/public/v1/email/provider-webhooks': 'providerWebhook',
};

/** Remembers ids the fuzz created, so later requests (and deletes) hit them too. */
function remember(world: World, live: Live, req: Req, res: { statusCode: number; body: string }): void {
  if (res.statusCode !== 201 || req.method !== 'POST') return;
  const kind = COLLECTIONS[req.url.split('?')[0]!.replace(/\/$/, '')];
  if (!kind) return;
  const key = req.headers['x-api-key'];
  const team = key === world.a.key ? world.a : key === world.b.key ? world.b : null;
  const body = JSON.parse(res.body);
  const id = Object.values(body).find((v): v is { id: string } => !!v && typeof v === 'object' && typeof (v as { id?: unknown }).id === 'string')?.id;
  if (!team || !id) return;
  (live.created[`${team.teamId}:${kind}`] ??= []).push(id);
  (live.created[team.teamId] ??= []).push(id);
}

export type FuzzOptions = {
  /** Requests sent one at a time. */
  runs: number;
  /** Concurrent bursts of 2 to 6 writes afterwards (default runs / 20). */
  bursts?: number;
  seed?: number;
  timeoutMs?: number;
  batch?: number;
  log?: (line: string) => void;
  /** Requests not counted in the stall figure (JIT, first compilations); default 100. */
  stallWarmup?: number;
};

export async function runFuzz(world: World, opts: FuzzOptions): Promise<Stats> {
  const ops = [...fuzzOperations(world.app), ...TRACKING_OPS];
  const live: Live = { created: {} };
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const batch = opts.batch ?? 200;
  const seed = opts.seed ?? Date.now() ^ (Math.random() * 2 ** 31);
  const stats: Stats = { seed, total: 0, byStatus: new Map(), byOperation: new Map(), ms: 0, maxStallMs: 0 };
  const meter = new StallMeter(opts.stallWarmup ?? 100);
  const started = Date.now();
  const send = async (req: Req) => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await meter.around(`${req.method} ${req.url.slice(0, 120)}`, () =>
        Promise.race([world.app.inject({ method: req.method as 'GET', url: req.url, headers: req.headers, payload: req.payload }), timeout]));
    } finally {
      clearTimeout(timer);
    }
  };
  const record = (req: Req, res: { statusCode: number; body: string; headers: Record<string, unknown> }) => {
    stats.total++;
    stats.byStatus.set(res.statusCode, (stats.byStatus.get(res.statusCode) ?? 0) + 1);
    const perOp = stats.byOperation.get(req.op) ?? new Map<number, number>();
    perOp.set(res.statusCode, (perOp.get(res.statusCode) ?? 0) + 1);
    stats.byOperation.set(req.op, perOp);
    const bad = violation(req, res);
    if (bad) throw new Error(`${req.method} ${req.url.slice(0, 300)}: ${bad}`);
    remember(world, live, req, res);
  };
  let sinceBatch = 0;
  const afterRequests = async (n: number) => {
    sinceBatch += n;
    if (sinceBatch < batch) return;
    sinceBatch = 0;
    const ping = await send({ op: 'ping', method: 'GET', url: '/public/v1/ping', headers: { 'x-api-key': world.a.key } });
    if (ping.statusCode !== 200) throw new Error(`the app stopped answering: ping is ${ping.statusCode} ${ping.body}`);
    opts.log?.(`${stats.total} requests, ${Math.round((Date.now() - started) / 1000)} s`);
  };
  const one = fc.asyncProperty(requestArbitrary(world, ops, live), async (req) => {
    record(req, await send(req));
    await afterRequests(1);
  });
  // Then bursts of 2 to 6 writes at once: races between transactions (lock
  // order, unique conflicts) only show under concurrency.
  const writes = ops.filter((o) => o.method !== 'GET');
  const writeRequest = requestArbitrary(world, writes, live);
  const burstOf = fc.oneof(
    fc.array(writeRequest, { minLength: 2, maxLength: 6 }),
    // The same request several times at once: idempotency keys, unique conflicts.
    fc.tuple(writeRequest, fc.integer({ min: 2, max: 4 })).map(([req, n]) => Array.from({ length: n }, () => req)),
  );
  const burst = fc.asyncProperty(burstOf, async (reqs) => {
    const answers = await Promise.all(reqs.map(send));
    reqs.forEach((req, i) => record(req, answers[i]!));
    await afterRequests(reqs.length);
  });
  const bursts = opts.bursts ?? Math.ceil(opts.runs / 20);
  try {
    await fc.assert(one, { numRuns: opts.runs, seed, verbose: 1 });
    if (bursts > 0) await fc.assert(burst, { numRuns: bursts, seed, verbose: 1 });
  } catch (err) {
    const cause = (err as Error).cause as Error | undefined;
    const why = cause ? `\nfirst failure: ${cause.message}` : '';
    throw new Error(`contract fuzz failed (seed ${seed}; re-run with --seed ${seed} or FUZZ_SEED=${seed}):\n${(err as Error).message}${why}`, { cause: err });
  }
  stats.ms = Date.now() - started;
  stats.maxStallMs = meter.maxMs();
  stats.maxWallStallMs = meter.maxWallMs;
  stats.worstStall = meter.worst;
  return stats;
}

export function formatStats(stats: Stats): string {
  const lines = [
    `${stats.total} requests in ${(stats.ms / 1000).toFixed(1)} s (seed ${stats.seed}); event-loop stall max ${stats.maxStallMs.toFixed(0)} ms` +
      (stats.worstStall ? ` (during ${stats.worstStall.label})` : ''),
    'by status:',
  ];
  for (const [s, n] of [...stats.byStatus].sort((x, y) => x[0] - y[0])) lines.push(`  ${s}  ${n}`);
  lines.push('by operation:');
  for (const [op, m] of [...stats.byOperation].sort((a, b) => byText(a[0], b[0]))) {
    lines.push(`  ${op.padEnd(62)} ${[...m].sort((x, y) => x[0] - y[0]).map(([s, n]) => `${s}:${n}`).join(' ')}`);
  }
  return lines.join('\n');
}
