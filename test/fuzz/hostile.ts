// Hostile input classes for the contract fuzz (issue "one team cannot hurt
// another"): huge, deep and wide JSON bodies, bodies on unknown paths and
// methods, bodyless routes under odd content types, hostile Liquid at
// template create, many tags, tracking replays and malformed tokens. Each
// request must be answered 2xx/3xx/4xx (never 5xx) without stalling the event
// loop that serves every team for more than STALL_LIMIT_MS (stall.ts).
// Big bodies are built once per process and shared, so generating a request
// costs nothing and no stall is the fuzz's own.
import fc from 'fast-check';
import { enc, type RawBody } from './generate.ts';
import type { Operation, Req } from './run.ts';
import { StallMeter } from './stall.ts';
import { idKindOf, type World } from './world.ts';

export const HOSTILE_CLASSES = ['bodies', 'paths', 'bodyless', 'liquid', 'tags', 'tracking'] as const;
export type HostileClass = (typeof HOSTILE_CLASSES)[number];
export type HostileReq = Req & { cls: HostileClass };

let built: ReturnType<typeof build> | undefined;
function build() {
  const contacts: string[] = [];
  let size = 0;
  for (let i = 0; size < 9_500_000; i++) {
    const c = `{"email":"h${i}@hostile.test","first_name":"x","tags":["a","b"]}`;
    contacts.push(c);
    size += c.length + 1;
  }
  const keys: string[] = [];
  for (let i = 0; i < 200_000; i++) keys.push(`"k${i}":${i}`);
  return {
    huge: `{"contacts":[${contacts.join(',')}]}`,
    deepArrays: `${'['.repeat(100_000)}${']'.repeat(100_000)}`,
    deepObjects: `${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`,
    manyKeys: `{${keys.join(',')}}`,
    tags100k: JSON.stringify({ email: 'tags@hostile.test', tags: Array.from({ length: 100_000 }, (_, i) => `t${i}`) }),
    dupTags: JSON.stringify({
      contacts: Array.from({ length: 1_000 }, (_, i) => ({ email: 'dup@hostile.test', tags: Array.from({ length: 100 }, (_, j) => `d${i}-${j}`) })),
    }),
    bigTemplate: '<p>{{ contact.first_name }}</p>\n'.repeat(Math.floor((1024 * 1024) / 32)),
    // Just under the cap of 50,000 Liquid parts, in the shape whose tree costs the most per part.
    capTemplate: `{% liquid\n${'echo a\n'.repeat(24_990)}%}`,
    linkBomb: '<a '.repeat(100_000),
    deepHtml: '<div>'.repeat(100_000),
    nestedHtml: ('<table><tr><td><div><p><b>'.repeat(40) + 'x').repeat(470),
  };
}
const bodies = () => (built ??= build());

const key = (world: World) => fc.constantFrom(world.a.key, world.b.key);
const json = (payload: string): RawBody => ({ payload, contentType: 'application/json' });

function req(cls: HostileClass, name: string, method: string, url: string, apiKey: string | undefined, body: RawBody = {}): HostileReq {
  const headers: Record<string, string> = {};
  if (apiKey) headers['x-api-key'] = apiKey;
  if (body.contentType) headers['content-type'] = body.contentType;
  return { cls, op: `hostile ${cls}: ${name}`, method, url, headers, ...(body.payload === undefined ? {} : { payload: body.payload }) };
}

/** Small Liquid programs whose output or work explodes; cheap to generate. */
const liquidBomb: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.integer({ min: 18, max: 27 }).map((n): [string, string] => [
    'capture doubling',
    `{% assign s = "xxxxxxxxxx" %}{% for i in (1..${n}) %}{% capture s %}{{ s }}{{ s }}{% endcapture %}{% endfor %}{{ s | size }}`,
  ]),
  fc.integer({ min: 5, max: 9 }).map((k): [string, string] => ['range', `{% for i in (1..${10 ** k}) %}{% endfor %}{{ i }}`]),
  fc.tuple(fc.integer({ min: 2, max: 4 }), fc.integer({ min: 10, max: 1_000 })).map(([depth, n]): [string, string] => [
    'nested loops',
    `${Array.from({ length: depth }, (_, d) => `{% for i${d} in (1..${n}) %}`).join('')}x${'{% endfor %}'.repeat(depth)}`,
  ]),
  fc.integer({ min: 10_000, max: 100_000 }).map((n): [string, string] => ['loop of <a', `{% for i in (1..${n}) %}<a {% endfor %}`]),
  fc.integer({ min: 100, max: 20_000 }).map((d): [string, string] => ['deep if', `${'{% if true %}'.repeat(d)}x${'{% endif %}'.repeat(d)}`]),
  fc.constantFrom<[string, string]>(['<a > x 100,000', '']).map(([n]): [string, string] => [n, bodies().linkBomb]),
  fc.constantFrom<[string, string]>(['1 MiB of Liquid', ''], ['Liquid at the parts cap', ''], ['100,000-deep <div>', ''], ['500 KB nested markup', '']).map(([n]): [string, string] => [
    n,
    n.startsWith('1 MiB') ? bodies().bigTemplate : n.startsWith('Liquid at') ? bodies().capTemplate : n.startsWith('100,000') ? bodies().deepHtml : bodies().nestedHtml,
  ]),
);

export function hostileArbitraries(world: World, ops: Operation[]): Record<HostileClass, fc.Arbitrary<HostileReq>> {
  const anyKey = fc.option(key(world), { freq: 3, nil: undefined });
  const tracked = world.tracking.paths;
  const bodyless = ops.filter((o) => o.method === 'POST' && !o.body && o.path.startsWith('/public/v1/'));
  return {
    bodies: fc.tuple(
      fc.constantFrom<[string, () => string]>(['~10 MB', () => bodies().huge], ['100,000-deep arrays', () => bodies().deepArrays], ['100,000-deep objects', () => bodies().deepObjects], ['200,000 keys', () => bodies().manyKeys]),
      fc.constantFrom('/public/v1/email/contacts/bulk-upsert', '/public/v1/email/contacts/upsert', '/public/v1/email/templates', '/public/v1/webhooks', '/sign-in', '/public/v1/email/events'),
      anyKey,
    ).map(([[name, body], url, k]) => req('bodies', `${name} to ${url}${k ? '' : ', no key'}`, 'POST', url, k, json(body()))),
    paths: fc.tuple(
      fc.constantFrom('/nope', '/public/v1/nope', '/public/v1/email/contacts', '/public/v1/ping', '/healthz', '/campaigns', tracked[0]!.split('?')[0]!),
      fc.constantFrom('POST', 'PUT', 'PATCH', 'DELETE'),
      fc.constantFrom<[string, () => string]>(['~10 MB', () => bodies().huge], ['deep', () => bodies().deepArrays], ['broken', () => '{"a":']),
      anyKey,
    ).map(([url, method, [name, body], k]) => req('paths', `${method} ${name} body on ${url.startsWith('/t/') ? 'a tracking route' : url}${k ? '' : ', no key'}`, method, url, k, json(body()))),
    bodyless: fc.tuple(
      fc.constantFrom(...(bodyless.length ? bodyless : ops)),
      fc.constantFrom<RawBody>({ payload: '', contentType: 'application/x-www-form-urlencoded' }, { payload: '', contentType: 'application/json' }, { payload: '', contentType: 'text/plain' }, { payload: '' }, { payload: '{}', contentType: 'application/json' }, {}),
    ).map(([op, body]) => {
      let url = op.path;
      for (const p of op.pathParams) {
        const kind = idKindOf(op.path, p);
        // The spare key (last), never the one the fuzz signs with.
        url = url.replace(`{${p}}`, world.a.ids[kind].at(-1) ?? '00000000-0000-0000-0000-000000000000');
      }
      return req('bodyless', `${op.id} with ${body.payload === undefined ? 'no body' : `"${body.payload.toString()}"`} as ${body.contentType ?? 'no type'}`, 'POST', url, world.a.key, body);
    }),
    liquid: fc.tuple(liquidBomb, key(world), fc.boolean()).map(([[name, content], k, alt]) =>
      req('liquid', `template create: ${name}`, 'POST', '/public/v1/email/templates', k, json(JSON.stringify({ name: 'hostile', content_type: 'html', subject: 'x', content, ...(alt ? { alt_content: 'plain' } : {}) }))),
    ),
    tags: fc.tuple(fc.constantFrom('100,000 tags', '1,000 duplicates x 100 tags', '+100 tags to one contact'), key(world), fc.nat()).map(([name, k, n]) =>
      name.startsWith('100,000')
        ? req('tags', name, 'POST', '/public/v1/email/contacts/upsert', k, json(bodies().tags100k))
        : name.startsWith('1,000')
          ? req('tags', name, 'POST', '/public/v1/email/contacts/bulk-upsert', k, json(bodies().dupTags))
          : req('tags', name, 'POST', '/public/v1/email/contacts/upsert', k, json(JSON.stringify({ email: 'grow@hostile.test', tags: Array.from({ length: 100 }, (_, j) => `g${n}-${j}`) }))),
    ),
    tracking: fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom(...tracked).map((u) => req('tracking', `replay ${u.split('/')[2]}`, 'GET', u, undefined)) },
      {
        weight: 2,
        arbitrary: fc.tuple(fc.constantFrom('/t/o', '/t/c', '/u'), fc.oneof(fc.uuid(), fc.string({ maxLength: 40 })), fc.oneof(fc.string({ maxLength: 80 }), fc.constantFrom('a'.repeat(5_000), '%', '%ZZ', '..'))).map(([p, id, sig]) =>
          req('tracking', 'malformed token', 'GET', `${p}/${enc(id) || 'x'}/${enc(sig) || 'x'}${p === '/t/o' ? '.gif' : ''}`, undefined)),
      },
    ),
  };
}

export type HostileReport = {
  total: number;
  byClass: Map<HostileClass, Map<number | string, number>>;
  serverErrors: string[];
  maxStallMs: number;
  p99StallMs: number;
  worst?: { ms: number; label: string };
  /** Slowest request, ms (wall time, for the figure). */
  slowest: { ms: number; label: string };
  ms: number;
};

/**
 * Every class `perClass` times (then `replayBurst` identical tracking hits at
 * once), one request at a time, through app.inject. Never throws on an answer:
 * the caller decides what to assert, so the figures can be reported on code
 * that still fails.
 */
export async function runHostile(world: World, ops: Operation[], opts: { perClass: number; seed: number; timeoutMs: number; replayBurst?: number }): Promise<HostileReport> {
  const arbs = hostileArbitraries(world, ops);
  const meter = new StallMeter(0);
  const report: HostileReport = { total: 0, byClass: new Map(), serverErrors: [], maxStallMs: 0, p99StallMs: 0, slowest: { ms: 0, label: '' }, ms: 0 };
  const started = Date.now();
  const send = async (r: HostileReq) => {
    const t0 = performance.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<{ statusCode: string; body: string }>((resolve) => {
      timer = setTimeout(() => resolve({ statusCode: 'timeout', body: '' }), opts.timeoutMs);
    });
    const res = await meter.around(r.op, () =>
      Promise.race([world.app.inject({ method: r.method as 'GET', url: r.url, headers: r.headers, payload: r.payload }), timeout]).finally(() => clearTimeout(timer)),
    );
    const ms = performance.now() - t0;
    if (ms > report.slowest.ms) report.slowest = { ms, label: r.op };
    const status = res.statusCode;
    report.total++;
    const m = report.byClass.get(r.cls) ?? new Map<number | string, number>();
    m.set(status, (m.get(status) ?? 0) + 1);
    report.byClass.set(r.cls, m);
    if (status === 'timeout' || Number(status) >= 500) report.serverErrors.push(`${r.op}: ${status} ${res.body.slice(0, 200)}`);
  };
  for (const [i, cls] of HOSTILE_CLASSES.entries()) {
    for (const r of fc.sample(arbs[cls], { numRuns: opts.perClass, seed: opts.seed + i })) await send(r);
  }
  const burst = opts.replayBurst ?? 20;
  if (burst > 0) {
    const path = world.tracking.paths[0]!;
    await Promise.all(Array.from({ length: burst }, () => send(req('tracking', 'replay burst', 'GET', path, undefined))));
  }
  report.maxStallMs = meter.maxMs();
  report.p99StallMs = meter.p99Ms();
  report.worst = meter.worst;
  report.ms = Date.now() - started;
  return report;
}

export function formatHostile(r: HostileReport): string {
  const lines = [`${r.total} hostile requests in ${(r.ms / 1000).toFixed(1)} s; event-loop stall max ${r.maxStallMs.toFixed(0)} ms, p99 ${r.p99StallMs.toFixed(0)} ms` +
    (r.worst ? ` (worst during: ${r.worst.label})` : '') + `; slowest request ${r.slowest.ms.toFixed(0)} ms (${r.slowest.label})`];
  for (const [cls, m] of r.byClass) lines.push(`  ${cls.padEnd(9)} ${[...m].map(([s, n]) => `${s}:${n}`).join(' ')}`);
  if (r.serverErrors.length) lines.push(`  5xx or no answer (${r.serverErrors.length}):`, ...r.serverErrors.slice(0, 10).map((e) => `    ${e}`));
  return lines.join('\n');
}
