// Request generators for the contract fuzz (test/fuzz/contract.test.ts,
// scripts/fuzz.ts): valid values from an operation's JSON Schema, then
// mutations of them (wrong types, missing and extra fields, boundary numbers,
// huge strings and arrays, deep nesting), raw bodies (invalid UTF-8, broken
// JSON, odd content types), query strings and path ids. No network: values that
// make the service connect somewhere (webhook URLs, SMTP hosts) come from fixed
// lists of 127.0.0.1 and public IP literals that are never contacted.
import fc from 'fast-check';

export type Schema = Record<string, any>;

/** A number written as this exact JSON text (JSON.stringify cannot say -0, 1e400 or 2^53+1). */
export class RawNumber {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

/** JSON text of a generated value; RawNumber goes out verbatim. */
export function toJson(value: unknown): string {
  if (value instanceof RawNumber) return value.text;
  if (Array.isArray(value)) return `[${value.map(toJson).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}:${toJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** What the generators draw real data from: ids of seeded rows, known e-mails, local endpoints. */
export type Pools = {
  emails: string[];
  uuids: string[];
  urls: string[];
  /** Ids for fields that name one kind of row (template_ids, webhook_id, …), so valid bodies reach the data. */
  idsByField: Record<string, string[]>;
};

// Strings that have broken parsers, databases and templates elsewhere.
export const NASTY_STRINGS = [
  '', ' ', '\u0000', 'a\u0000b', '\ud800', '\udfff\ud800', '💥'.repeat(3), 'NaN', 'Infinity', '-0', 'null', 'true', '0x10', '1e308',
  '%00', '%ZZ', '../../etc/passwd', "' OR 1=1 --", '"; DROP TABLE contacts; --', '<script>alert(1)</script>', '{{ 7 | times: 7 }}',
  '{% for i in (1..100000000) %}x{% endfor %}', '{{', '{%', '\\', '\r\n\r\n', '\u202e', 'ａ@ｅｘａｍｐｌｅ.com', '__proto__', 'constructor',
  ' a@example.com ', 'A@EXAMPLE.COM', 'a@b', '@example.com', 'a@@example.com', 'javascript:alert(1)', 'https://', 'http://127.0.0.1:1/',
  'https://localhost/x', 'https://[::1]/', 'https://10.0.0.1/', 'https://169.254.169.254/latest/meta-data', 'file:///etc/passwd',
];

const BIG = [256, 2_049, 70_000, 1_048_577];
export const hugeString = fc.constantFrom(...BIG).chain((n) => fc.constantFrom('a'.repeat(n), '💥'.repeat(Math.ceil(n / 2)), 'é'.repeat(n)));

const RAW_NUMBERS = ['-0', '1e400', '-1e400', '9007199254740993', '1.0', '1E2', '5e-324', '1e-400', '12345678901234567890123', '0.1e1'];
const FIXED_NUMBERS = [0, -1, 1, 0.5, 1.5, -0.5, 2 ** 31, 2 ** 31 - 1, -(2 ** 31), 2 ** 53, -(2 ** 53), 2 ** 63, 1e308, -1e308, 5e-324];

/** min-1, min, max, max+1 of every numeric bound in a schema, plus the usual suspects. */
export function boundaryNumbers(schema: Schema): fc.Arbitrary<unknown> {
  const bounds = new Set<number>(FIXED_NUMBERS);
  walk(schema, (s) => {
    for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems']) {
      if (typeof s[k] === 'number') for (const d of [-1, 0, 1]) bounds.add(s[k] + d);
    }
  });
  return fc.oneof(fc.constantFrom(...bounds), fc.constantFrom(...RAW_NUMBERS).map((t) => new RawNumber(t)), fc.constantFrom(...[...bounds].map(String)));
}

function walk(schema: unknown, visit: (s: Schema) => void): void {
  if (!schema || typeof schema !== 'object') return;
  if (!Array.isArray(schema)) visit(schema as Schema);
  for (const v of Object.values(schema)) walk(v, visit);
}

const word = fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789'.split('')), minLength: 1, maxLength: 10 });
const anyText = (min: number, max: number) =>
  fc.oneof(
    { weight: 6, arbitrary: fc.string({ minLength: min, maxLength: max }) },
    { weight: 2, arbitrary: fc.string({ unit: 'binary', minLength: min, maxLength: max }) },
    { weight: 1, arbitrary: fc.string({ unit: 'grapheme', minLength: min, maxLength: max }) },
  );

/** A generated value that satisfies `schema` (as far as formats and names allow). */
export function validValue(schema: Schema, pools: Pools, name = ''): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum);
  for (const k of ['anyOf', 'oneOf'] as const) {
    if (Array.isArray(schema[k])) return fc.oneof(...schema[k].map((s: Schema) => validValue(s, pools, name)));
  }
  if (Array.isArray(schema.type)) {
    return fc.oneof(...schema.type.map((type: string) => validValue({ ...schema, type }, pools, name)));
  }
  const type = schema.type ?? (schema.properties ? 'object' : undefined);
  switch (type) {
    case 'null':
      return fc.constant(null);
    case 'boolean':
      return fc.boolean();
    case 'integer': {
      const min = Math.max(schema.minimum ?? -1_000_000, Number.MIN_SAFE_INTEGER);
      const max = Math.min(schema.maximum ?? 1_000_000, Number.MAX_SAFE_INTEGER);
      return fc.oneof(fc.integer({ min, max }), fc.constantFrom(min, max));
    }
    case 'number': {
      const min = schema.minimum ?? -1e9;
      const max = schema.maximum ?? 1e9;
      return fc.oneof(fc.double({ min, max, noNaN: true, noDefaultInfinity: true }), fc.constantFrom(min, max, 0));
    }
    case 'string':
      return validString(schema, pools, name);
    case 'array': {
      if (name === 'rules') return segmentRules;
      const item = validValue(schema.items ?? {}, pools, name);
      const constraints = { minLength: schema.minItems ?? 0, maxLength: Math.min(schema.maxItems ?? 4, Math.max(schema.minItems ?? 0, 4)) };
      return schema.uniqueItems ? fc.uniqueArray(item, { ...constraints, selector: (v) => toJson(v) }) : fc.array(item, constraints);
    }
    case 'object':
      return validObject(schema, pools);
    default:
      return jsonValue;
  }
}

export const jsonValue: fc.Arbitrary<unknown> = fc.jsonValue({ maxDepth: 3 });

// Campaign segment rules are free-form in the schema and checked in code
// (src/campaigns/segment.ts): generated from their grammar so some pass.
const ruleValue = fc.oneof(fc.string({ maxLength: 10 }), fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom('2025-01-01T00:00:00Z', 'DE', 'subscribed', null, [], ['vip']));
const fieldRule = fc.record(
  {
    field: fc.constantFrom('email', 'status', 'first_name', 'country_code', 'custom_int_1', 'custom_dec_1', 'created_at', 'sent_count', 'tags', 'last_opened_at', 'nope'),
    operator: fc.constantFrom('equals', 'not_equals', 'contains', 'not_contains', 'greater_than', 'less_than', 'is_set', 'is_not_set', 'has_tag', 'not_has_tag', 'eq', 'gt', 'bogus'),
    value: ruleValue,
  },
  { requiredKeys: ['field', 'operator'] },
);
const { rule } = fc.letrec<{ rule: unknown }>((tie) => ({
  rule: fc.oneof({ depthSize: 'small', withCrossShrink: true }, fieldRule, fc.record({ any: fc.array(tie('rule'), { maxLength: 3 }) }), fc.record({ all: fc.array(tie('rule'), { maxLength: 3 }) })),
}));
const segmentRules = fc.array(rule, { maxLength: 4 });

function validString(schema: Schema, pools: Pools, name: string): fc.Arbitrary<string> {
  const min = schema.minLength ?? 0;
  const max = Math.min(schema.maxLength ?? 40, Math.max(min, 40));
  const uuidPattern = typeof schema.pattern === 'string' && schema.pattern.includes('[0-9a-fA-F]{8}');
  if (schema.format === 'uuid' || uuidPattern) {
    const own = pools.idsByField[name];
    return fc.oneof(
      { weight: own?.length ? 40 : 0, arbitrary: fc.constantFrom(...(own?.length ? own : [''])) },
      { weight: 2, arbitrary: fc.constantFrom(...pools.uuids) },
      { weight: 1, arbitrary: fc.uuid() },
    );
  }
  if (schema.format === 'contact-email' || schema.format === 'email') {
    return fc.oneof(fc.constantFrom(...pools.emails), fc.tuple(word, word).map(([a, b]) => `${a}@${b}.example.com`));
  }
  if (schema.format === 'country-code') return fc.constantFrom('US', 'de', 'FR', 'gb', 'JP');
  if (schema.format === 'date-time') {
    // RFC 3339 at the edges: what the format takes and the database may not.
    // Also the spellings new Date() cannot read (an offset of hours alone or without its
    // colon, a space for the T) and dates that do not exist.
    const edges = fc.constantFrom('0000-01-01T00:00:00Z', '0001-01-01T00:00:00+01:00', '0001-01-01T00:00:00+15:59', '9999-12-31T23:59:59-15:59', '2024-12-31T23:59:60Z',
      '2024-01-01T00:00:00.123456789Z', '2024-01-01t00:00:00z', '1969-12-31T23:59:59-23:59', '275760-09-13T00:00:00Z', '2030-01-01T00:00:00+01', '2030-01-01T00:00:00-0530',
      '2030-01-01 00:00:00Z', '2026-02-31T00:00:00Z', '2030-06-30T23:59:60+01');
    return fc.oneof({ weight: 1, arbitrary: edges }, { weight: 4, arbitrary: fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2200-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString()) });
  }
  if (name === 'url') return fc.constantFrom(...pools.urls);
  if (name === 'host') return fc.constantFrom('127.0.0.1', 'smtp.example.com', '::1');
  if (name === 'content') return fc.oneof(anyText(min, max), fc.constantFrom('<p>Hi {{ contact.first_name }}</p>', '{% if x %}<b>{{ event.payload.a }}</b>{% endif %}'));
  return anyText(min, max);
}

function validObject(schema: Schema, pools: Pools): fc.Arbitrary<Record<string, unknown>> {
  const props: Record<string, Schema> = schema.properties ?? {};
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [k, s] of Object.entries(props)) model[k] = validValue(s, pools, k);
  const base = fc.record(model, { requiredKeys: (schema.required ?? []).filter((k: string) => k in props) });
  if (schema.additionalProperties && typeof schema.additionalProperties === 'object' && !schema.properties) {
    return fc.dictionary(fc.oneof(word, fc.string({ maxLength: 8 })), jsonValue, { maxKeys: 5 });
  }
  return base;
}

/** A value of a JSON type other than whatever is there. */
const wrongType = fc.constantFrom<unknown>(null, true, false, 0, -1, 1.5, '', 'text', [], [null], {}, { a: 1 }, ['a@example.com']);

const deepNest = fc.tuple(fc.constantFrom(10, 100, 1_000, 10_000), fc.boolean()).map(([depth, arrays]) => {
  // Built as JSON text (a RawNumber holds any JSON): no recursion here either.
  const text = arrays ? `${'['.repeat(depth)}1${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
  return new RawNumber(text);
});

type Mutation =
  | { kind: 'replace'; at: number; value: unknown }
  | { kind: 'delete'; at: number }
  | { kind: 'extra'; at: number; key: string; value: unknown }
  | { kind: 'grow'; at: number; length: number };

export function mutation(schema: Schema): fc.Arbitrary<Mutation> {
  const at = fc.nat({ max: 1_000 });
  const replacement = fc.oneof(
    { weight: 3, arbitrary: wrongType },
    { weight: 3, arbitrary: boundaryNumbers(schema) },
    { weight: 2, arbitrary: fc.constantFrom(...NASTY_STRINGS) },
    { weight: 1, arbitrary: hugeString },
    { weight: 1, arbitrary: deepNest },
  );
  return fc.oneof(
    { weight: 5, arbitrary: fc.record({ kind: fc.constant('replace' as const), at, value: replacement }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('delete' as const), at }) },
    {
      weight: 2,
      arbitrary: fc.record({ kind: fc.constant('extra' as const), at, key: fc.oneof(word, fc.constantFrom('__proto__', 'constructor', 'id', 'team_id', '')), value: jsonValue }),
    },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('grow' as const), at, length: fc.constantFrom(51, 101, 1_001, 10_001) }) },
  );
}

type Slot = { parent: Record<string, unknown> | unknown[] | null; key: string | number };

function slots(root: unknown): Slot[] {
  const out: Slot[] = [{ parent: null, key: '' }];
  const visit = (v: unknown) => {
    if (Array.isArray(v)) {
      v.forEach((x, i) => {
        out.push({ parent: v, key: i });
        visit(x);
      });
    } else if (v && typeof v === 'object' && !(v instanceof RawNumber)) {
      for (const [k, x] of Object.entries(v)) {
        out.push({ parent: v as Record<string, unknown>, key: k });
        visit(x);
      }
    }
  };
  visit(root);
  return out;
}

/** Applies one mutation to a copy of `value` (the root when the picked slot is the whole value). */
export function mutate(value: unknown, m: Mutation): unknown {
  const root = { v: structuredCloneJson(value) };
  const all = slots(root.v).map((s) => (s.parent === null ? { parent: root as Record<string, unknown>, key: 'v' } : s));
  const slot = all[m.at % all.length]!;
  const parent = slot.parent as Record<string | number, unknown>;
  const current = parent[slot.key];
  switch (m.kind) {
    case 'replace':
      parent[slot.key] = m.value;
      break;
    case 'delete':
      if (Array.isArray(parent)) parent.splice(slot.key as number, 1);
      else delete parent[slot.key];
      break;
    case 'extra':
      if (current && typeof current === 'object' && !Array.isArray(current) && !(current instanceof RawNumber)) {
        Object.defineProperty(current, m.key, { value: m.value, enumerable: true, writable: true, configurable: true });
      } else parent[slot.key] = { [m.key]: m.value };
      break;
    case 'grow': {
      // Capped near 4 MB of JSON: bigger says nothing new and costs the run (the body limit is 10 MiB).
      const items = Array.isArray(current) && current.length ? current : [current ?? 1];
      const each = Math.max(1, ...items.map((x) => toJson(x).length));
      const length = Math.min(m.length, Math.ceil(4_000_000 / each));
      parent[slot.key] = Array.from({ length }, (_, i) => items[i % items.length]);
      break;
    }
  }
  return root.v;
}

function structuredCloneJson(v: unknown): unknown {
  if (v instanceof RawNumber || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(structuredCloneJson);
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, structuredCloneJson(x)]));
}

/** A body for a schema: mostly valid, often mutated once or twice. */
export function bodyValue(schema: Schema, pools: Pools): fc.Arbitrary<unknown> {
  const valid = validValue(schema, pools);
  return fc.oneof(
    { weight: 3, arbitrary: valid },
    { weight: 3, arbitrary: fc.tuple(valid, mutation(schema)).map(([v, m]) => mutate(v, m)) },
    { weight: 1, arbitrary: fc.tuple(valid, mutation(schema), mutation(schema)).map(([v, a, b]) => mutate(mutate(v, a), b)) },
  );
}

export type RawBody = { payload?: string | Buffer; contentType?: string };

const JSON_TYPES = [
  'application/json', 'application/json; charset=utf-8', 'application/json; charset=UTF-8', 'Application/JSON', 'application/json;charset="utf-8"',
  'application/json; charset=latin1', 'application/json; charset=utf-16', 'application/json; foo=bar', 'application/json;', 'application/json ; charset=utf-8',
];
const ODD_TYPES = [
  'text/plain', 'text/plain; charset=utf-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=XyZ', 'multipart/form-data',
  'application/xml', 'application/jsonx', 'application/vnd.api+json', 'application/problem+json', '*/*', 'application/', ';', 'json', 'text/json',
  'application/octet-stream', 'application/json, text/plain',
];

const MULTIPART = '--XyZ\r\ncontent-disposition: form-data; name="email"\r\n\r\na@example.com\r\n--XyZ--\r\n';
const INVALID_UTF8 = [Buffer.from([0xff, 0xfe]), Buffer.from([0xc3, 0x28]), Buffer.from([0xe2, 0x82]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]), Buffer.from([0x00])];

/** Inserts invalid UTF-8 bytes inside the first string of a JSON text (or at a random offset). */
function withBadBytes(json: string, bytes: Buffer, offset: number): Buffer {
  const quote = json.indexOf('"', 1);
  const at = quote > 0 ? quote + 1 : offset % (json.length + 1);
  const b = Buffer.from(json);
  const byteAt = Buffer.byteLength(json.slice(0, at));
  return Buffer.concat([b.subarray(0, byteAt), bytes, b.subarray(byteAt)]);
}

/** How a body value travels: JSON with a JSON content type mostly, else raw bytes, broken text, odd types, none. */
export function encodeBody(value: fc.Arbitrary<unknown>): fc.Arbitrary<RawBody> {
  const json = value.map(toJson);
  return fc.oneof(
    { weight: 20, arbitrary: fc.tuple(json, fc.constantFrom(...JSON_TYPES)).map(([payload, contentType]) => ({ payload, contentType })) },
    { weight: 2, arbitrary: fc.tuple(json, fc.constantFrom(...ODD_TYPES)).map(([payload, contentType]) => ({ payload, contentType })) },
    { weight: 1, arbitrary: fc.constant({}) },
    { weight: 1, arbitrary: json.map((payload) => ({ payload })) },
    { weight: 1, arbitrary: fc.constant({ payload: MULTIPART, contentType: 'multipart/form-data; boundary=XyZ' }) },
    { weight: 1, arbitrary: fc.constant({ payload: 'email=a%40example.com&x=1', contentType: 'application/x-www-form-urlencoded' }) },
    {
      weight: 2,
      arbitrary: fc.tuple(json, fc.constantFrom(...INVALID_UTF8), fc.nat()).map(([j, bytes, at]) => ({ payload: withBadBytes(j, bytes, at), contentType: 'application/json' })),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(json, fc.nat(), fc.constantFrom('', ' ', 'null', '[]', '"s"', '1', '\ufeff{}', '{"a":1,"a":2}', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{"x":1}}}', '{', '}{'))
        .chain(([j, cut, fixed]) => fc.constantFrom(j.slice(0, cut % (j.length + 1)), fixed, `\ufeff${j}`, `${j}${j}`, ` \n${j}\n `))
        .map((payload) => ({ payload, contentType: 'application/json' })),
    },
  );
}

/** encodeURIComponent, except that a lone surrogate goes out as its (invalid UTF-8) CESU-8 bytes instead of throwing. */
export function enc(s: string): string {
  return s.isWellFormed() ? encodeURIComponent(s) : encodeURIComponent(s.toWellFormed()).replace(/%EF%BF%BD/g, '%ED%A0%80');
}

/** A query string for an operation's query parameters: valid, wrong, repeated, bracketed, unknown, badly encoded. */
export function queryString(params: { name: string; schema: Schema }[], pools: Pools): fc.Arbitrary<string> {
  const one = (p: { name: string; schema: Schema }) =>
    fc.oneof(
      { weight: 4, arbitrary: fc.constant([] as string[]) },
      { weight: 4, arbitrary: validValue(p.schema, pools, p.name).map((v) => (Array.isArray(v) ? v : [v]).map((x) => `${enc(p.name)}=${enc(String(x))}`)) },
      { weight: 2, arbitrary: boundaryNumbers(p.schema).map((v) => [`${enc(p.name)}=${enc(v instanceof RawNumber ? v.text : String(v))}`]) },
      { weight: 2, arbitrary: fc.constantFrom(...NASTY_STRINGS).map((v) => [`${enc(p.name)}=${enc(v)}`]) },
      { weight: 1, arbitrary: fc.constantFrom(`${p.name}=1&${p.name}=2`, `${p.name}[]=1`, `${p.name}[0]=1&${p.name}[1]=x`, `${p.name}`, `${p.name}=`, `${p.name}=%ZZ`, `${p.name}=%E0%A4%A`).map((s) => [s]) },
      { weight: 1, arbitrary: hugeString.map((s) => [`${enc(p.name)}=${enc(s.slice(0, 5_000))}`]) },
    );
  const valid = (p: { name: string; schema: Schema }) =>
    fc.option(validValue(p.schema, pools, p.name).map((v) => (Array.isArray(v) ? v : [v]).map((x) => `${enc(p.name)}=${enc(String(x))}`)), { nil: [] as string[] });
  const extra = fc.constantFrom([] as string[], [] as string[], [] as string[], ['unknown=1'], ['a[b][c]=1'], ['=x'], ['&&&'], ['__proto__[x]=1'], ['%00=%00']);
  return fc.oneof(
    fc.tuple(...params.map(valid)).map((parts) => parts.flat().join('&')),
    fc.tuple(fc.tuple(...params.map(one)), extra).map(([parts, more]) => [...parts.flat(), ...more].join('&')),
  );
}

/** A path id: usually a real id of the right kind, else another kind's, a random UUID or something that is no UUID at all. */
export function pathId(own: string[], others: string[]): fc.Arbitrary<string> {
  const e = enc;
  const real = own.length ? fc.constantFrom(...own) : fc.uuid();
  return fc.oneof(
    { weight: 8, arbitrary: real },
    { weight: 1, arbitrary: real.map((id) => id.toUpperCase()) },
    { weight: 2, arbitrary: others.length ? fc.constantFrom(...others) : fc.uuid() },
    { weight: 2, arbitrary: fc.uuid() },
    {
      weight: 3,
      arbitrary: fc.oneof(
        fc.constantFrom('abc', '1', '0', '-1', '1e308', 'null', 'undefined', '%ZZ', '%', '%00', '..', '.', '%2e%2e', '%2F', 'a'.repeat(201), 'a'.repeat(199)),
        fc.constantFrom(...NASTY_STRINGS.filter((s) => s !== '')).map(e),
        real.map((id) => `${id}x`),
        real.map((id) => `{${id}}`),
        real.map((id) => id.replace(/-/g, '')),
        fc.string({ minLength: 1, maxLength: 50 }).map(e),
      ),
    },
  );
}
