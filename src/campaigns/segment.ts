// segment_query.rules: which contacts a campaign mails. Every top-level rule
// must hold (AND); `{any: [...]}` and `{all: [...]}` groups nest OR and AND. Rules are checked when the campaign is created (422 naming the bad
// rule) and evaluated by the engine on the contact row it has already loaded,
// so a segment costs no extra query per decision.
import type { ErrorDetail } from '../lib/errors.ts';
import { CONTACT_FIELDS } from '../contacts/fields.ts';
import { sql, type RawBuilder } from 'kysely';

export const SEGMENT_OPERATORS = [
  'equals',
  'not_equals',
  'contains',
  'not_contains',
  'greater_than',
  'less_than',
  'is_set',
  'is_not_set',
  'has_tag',
  'not_has_tag',
] as const;
export type SegmentOperator = (typeof SEGMENT_OPERATORS)[number];

// Shorter spellings clients send (`op: "eq"`), mapped to the documented names.
const OPERATOR_ALIASES: Record<string, SegmentOperator> = {
  eq: 'equals', ne: 'not_equals', neq: 'not_equals', gt: 'greater_than', lt: 'less_than',
  exists: 'is_set', not_exists: 'is_not_set',
};

/** A rule in its one canonical form: a group (any/all of rules) or a field test. */
type Canonical =
  | { group: 'any' | 'all'; rules: unknown[] }
  | { field: string | undefined; operator: SegmentOperator; value: unknown };

// Fields a rule may read: the writable contact fields plus identity and activity.
const EXTRA_FIELDS: Record<string, 'text' | 'bigint' | 'timestamptz'> = {
  email: 'text',
  status: 'text',
  created_at: 'timestamptz',
  updated_at: 'timestamptz',
  sent_count: 'bigint',
  opens_count: 'bigint',
  clicks_count: 'bigint',
  leads_count: 'bigint',
  sales_count: 'bigint',
  last_sent_at: 'timestamptz',
  last_opened_at: 'timestamptz',
  last_clicked_at: 'timestamptz',
  last_lead_at: 'timestamptz',
  last_sale_at: 'timestamptz',
};
/** The kind of a field a rule may read (text, bigint, numeric, boolean, timestamptz...), or undefined. */
export const segmentFieldKind = (name: string): string | undefined => FIELD_KINDS.get(name);
const FIELD_KINDS = new Map<string, string>([...CONTACT_FIELDS.map((f) => [f.name, f.kind] as const), ...Object.entries(EXTRA_FIELDS)]);
/** Every field a rule may name, tags included (the dashboard's segment builder offers these). */
export const SEGMENT_FIELDS = ['tags', ...FIELD_KINDS.keys()];

const NO_VALUE = new Set<SegmentOperator>(['is_set', 'is_not_set']);
const ORDERED = new Set<SegmentOperator>(['greater_than', 'less_than']);
const MAX_DEPTH = 3;

/**
 * `{any: [...]}` / `{all: [...]}` are groups; `op` means `operator`; `field: "tags"`
 * with equals/contains (or their negations) is has_tag (not_has_tag).
 */
function canonical(raw: Record<string, unknown>): Canonical | string {
  for (const group of ['any', 'all'] as const) {
    if (group in raw) {
      if (Object.keys(raw).length !== 1) return `a group has only the key "${group}"`;
      return Array.isArray(raw[group]) ? { group, rules: raw[group] as unknown[] } : `"${group}" must be an array of rules`;
    }
  }
  const name = raw.operator ?? raw.op;
  let operator = (typeof name === 'string' ? (OPERATOR_ALIASES[name] ?? name) : name) as SegmentOperator;
  if (!SEGMENT_OPERATORS.includes(operator)) return 'operator';
  let field = raw.field as string | undefined;
  if (field === 'tags') {
    if (['equals', 'contains', 'has_tag'].includes(operator)) operator = 'has_tag';
    else if (['not_equals', 'not_contains', 'not_has_tag'].includes(operator)) operator = 'not_has_tag';
    else return 'operator';
    field = undefined;
  }
  return { field, operator, value: raw.value };
}

/** 1 January 4713 BC, PostgreSQL's earliest timestamp; Date.parse reads times back to 271821 BC. */
const PG_MIN_TIME_MS = Date.UTC(-4712, 0, 1);

/** A rule's date-time as PostgreSQL can hold it, or null (not a date-time, or before its range: a 500 if sent). */
function storableTime(v: unknown): Date | null {
  if (typeof v !== 'string') return null;
  const t = Date.parse(v);
  return Number.isNaN(t) || t < PG_MIN_TIME_MS ? null : new Date(t);
}

/** One detail per malformed rule (field `segment_query.rules[i]…`); empty when all are valid. */
export function checkSegmentRules(rules: unknown[], at = 'segment_query.rules', depth = 1): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  rules.forEach((raw, i) => {
    const here = `${at}[${i}]`;
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
      details.push({ field: here, message: 'must be an object {field, operator, value} or a group {any: [...]} / {all: [...]}' });
      return;
    }
    const rule = raw as Record<string, unknown>;
    const c = canonical(rule);
    if (c === 'operator') {
      details.push({ field: `${here}.operator`, message: `must be one of ${SEGMENT_OPERATORS.join(', ')} (tags: has_tag, not_has_tag)` });
      return;
    }
    if (typeof c === 'string') {
      details.push({ field: here, message: c });
      return;
    }
    if ('group' in c) {
      if (depth >= MAX_DEPTH) details.push({ field: here, message: `groups nest at most ${MAX_DEPTH} deep` });
      else details.push(...checkSegmentRules(c.rules, `${here}.${c.group}`, depth + 1));
      return;
    }
    const extra = Object.keys(rule).filter((k) => !['field', 'operator', 'op', 'value'].includes(k));
    if (extra.length) details.push({ field: `${here}.${extra[0]}`, message: 'is not an allowed field' });
    if (c.operator === 'has_tag' || c.operator === 'not_has_tag') {
      if (typeof c.value !== 'string' || c.value === '') details.push({ field: `${here}.value`, message: 'must be a tag (non-empty string)' });
      return;
    }
    const kind = c.field !== undefined ? FIELD_KINDS.get(c.field) : undefined;
    if (!kind) {
      details.push({ field: `${here}.field`, message: 'must name a contact field (e.g. first_name, custom_int_1, country_code, tags)' });
      return;
    }
    if (NO_VALUE.has(c.operator)) return;
    const value = c.value;
    if (c.operator === 'contains' || c.operator === 'not_contains') {
      if (typeof value !== 'string' || value === '') details.push({ field: `${here}.value`, message: 'must be a non-empty string' });
    } else if (ORDERED.has(c.operator)) {
      if (kind === 'text' || kind === 'boolean') {
        details.push({ field: `${here}.operator`, message: `${c.operator} needs a number or date-time field` });
      } else if (kind === 'timestamptz' ? storableTime(value) === null : typeof value !== 'number' || !Number.isFinite(value)) {
        details.push({ field: `${here}.value`, message: kind === 'timestamptz' ? 'must be an ISO 8601 date-time' : 'must be a number' });
      }
    } else if (value !== null && !['string', 'number', 'boolean'].includes(typeof value)) {
      details.push({ field: `${here}.value`, message: 'must be a string, number, boolean or null' });
    }
  });
  return details;
}

function comparable(v: unknown): number | string | boolean | null {
  if (v === null || v === undefined) return null;
  if (v instanceof Date) return v.getTime();
  return v as string | number | boolean;
}

/**
 * A value as the text a rule compares, or null for what has none. A date-time
 * is its ISO form, as the API shows it: String(date) is the process time
 * zone's long form ("Tue Nov 24 2026 …"), so `contains "2026-11"` missed and
 * the answer changed with TZ. An object (only in a rule stored before checks
 * existed) has no text: "[object Object]" must not match anything.
 */
function textOf(v: unknown): string | null {
  if (v instanceof Date) return Number.isNaN(v.getTime()) ? null : v.toISOString();
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  return null;
}

/** Equality across the types a rule and a row may carry (numeric columns come as strings). */
function same(actual: unknown, expected: unknown, kind: string | undefined): boolean {
  const a = comparable(actual);
  if (expected === null) return a === null;
  if (a === null) return false;
  const e = textOf(expected);
  if (e === null) return false;
  if (kind === 'timestamptz') return a === Date.parse(e);
  if (kind === 'bigint' || kind === 'numeric') return Number(a) === Number(expected);
  if (kind === 'boolean') return a === expected;
  return String(a).toLowerCase() === e.toLowerCase();
}

function ordered(actual: unknown, expected: unknown, kind: string | undefined): number | null {
  const a = comparable(actual);
  if (a === null) return null;
  const x = Number(a);
  const y = kind === 'timestamptz' ? Date.parse(textOf(expected) ?? '') : Number(expected);
  return Number.isNaN(x) || Number.isNaN(y) ? null : x - y;
}

/** Whether the contact matches every rule. A malformed rule (stored before checks existed) never matches. */
export function matchesSegment(contact: Record<string, unknown>, rules: unknown[], depth = 1): boolean {
  return rules.every((raw) => matchesRule(contact, raw, depth));
}

function matchesRule(contact: Record<string, unknown>, raw: unknown, depth: number): boolean {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw) || depth > MAX_DEPTH) return false;
  const rule = canonical(raw as Record<string, unknown>);
  if (typeof rule === 'string') return false;
  if ('group' in rule) {
    return rule.group === 'any'
      ? rule.rules.some((r) => matchesRule(contact, r, depth + 1))
      : rule.rules.every((r) => matchesRule(contact, r, depth + 1));
  }
  const tags = (contact.tags as string[] | undefined) ?? [];
  switch (rule.operator) {
    case 'has_tag':
      return tags.includes(String(rule.value));
    case 'not_has_tag':
      return !tags.includes(String(rule.value));
  }
  const kind = rule.field ? FIELD_KINDS.get(rule.field) : undefined;
  if (!kind) return false;
  const actual = contact[rule.field!];
  switch (rule.operator) {
    case 'equals':
      return same(actual, rule.value, kind);
    case 'not_equals':
      return !same(actual, rule.value, kind);
    case 'contains':
    case 'not_contains': {
      const text = textOf(actual);
      const wanted = textOf(rule.value);
      const has = text !== null && wanted !== null && text.toLowerCase().includes(wanted.toLowerCase());
      return rule.operator === 'contains' ? has : !has;
    }
    case 'greater_than':
    case 'less_than': {
      const d = ordered(actual, rule.value, kind);
      if (d === null) return false;
      return rule.operator === 'greater_than' ? d > 0 : d < 0;
    }
    case 'is_set':
      return actual !== null && actual !== undefined && actual !== '';
    case 'is_not_set':
      return actual === null || actual === undefined || actual === '';
    default:
      return false;
  }
}

/**
 * The segment as one SQL condition on `contacts` (alias-free column names),
 * for selecting a broadcast's recipients in the database. Only forms whose
 * SQL answer is exactly matchesSegment's are compiled; when any rule is of
 * another form (a rule stored before checks existed, a number compared with a
 * text field) the answer is null and the caller tests each row with
 * matchesSegment instead. Callers may test rows with matchesSegment as well:
 * the two agree on every compiled form.
 */
export function segmentSql(rules: unknown[]): RawBuilder<boolean> | null {
  try {
    return rules.length === 0 ? sql<boolean>`true` : and(rules.map((r) => ruleSql(r, 1)));
  } catch (err) {
    if (err instanceof NotCompiled) return null;
    throw err;
  }
}

class NotCompiled extends Error {}
const and = (parts: RawBuilder<boolean>[]) => sql<boolean>`(${sql.join(parts, sql` AND `)})`;
const or = (parts: RawBuilder<boolean>[]) => (parts.length === 0 ? sql<boolean>`false` : sql<boolean>`(${sql.join(parts, sql` OR `)})`);

function ruleSql(raw: unknown, depth: number): RawBuilder<boolean> {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw) || depth > MAX_DEPTH) throw new NotCompiled();
  const rule = canonical(raw as Record<string, unknown>);
  if (typeof rule === 'string') throw new NotCompiled();
  if ('group' in rule) {
    const parts = rule.rules.map((r) => ruleSql(r, depth + 1));
    return rule.group === 'any' ? or(parts) : parts.length === 0 ? sql<boolean>`true` : and(parts);
  }
  const v = rule.value;
  if (rule.operator === 'has_tag' || rule.operator === 'not_has_tag') {
    if (typeof v !== 'string') throw new NotCompiled();
    return rule.operator === 'has_tag' ? sql<boolean>`(${v}::text = ANY (tags))` : sql<boolean>`(NOT (${v}::text = ANY (tags)))`;
  }
  const kind = rule.field ? FIELD_KINDS.get(rule.field) : undefined;
  if (!kind || !rule.field) throw new NotCompiled();
  const col = sql.ref(rule.field);
  const eq = (): RawBuilder<boolean> => {
    if (v === null) return sql<boolean>`(${col} IS NULL)`;
    if (kind === 'text' && typeof v === 'string') return sql<boolean>`coalesce(lower(${col}) = lower(${v}::text), false)`;
    if ((kind === 'bigint' || kind === 'numeric') && typeof v === 'number' && Number.isFinite(v)) {
      return sql<boolean>`coalesce(${col}::numeric = ${String(v)}::numeric, false)`;
    }
    if (kind === 'boolean' && typeof v === 'boolean') return sql<boolean>`coalesce(${col} = ${v}, false)`;
    const at = kind === 'timestamptz' ? storableTime(v) : null;
    if (at) return sql<boolean>`coalesce(${col} = ${at}::timestamptz, false)`;
    throw new NotCompiled();
  };
  switch (rule.operator) {
    case 'equals':
      return eq();
    case 'not_equals':
      return sql<boolean>`(NOT ${eq()})`;
    case 'contains':
    case 'not_contains': {
      if (kind !== 'text' || typeof v !== 'string' || v === '') throw new NotCompiled();
      const has = sql<boolean>`coalesce(strpos(lower(${col}), lower(${v}::text)) > 0, false)`;
      return rule.operator === 'contains' ? has : sql<boolean>`(NOT ${has})`;
    }
    case 'greater_than':
    case 'less_than': {
      const op = sql.raw(rule.operator === 'greater_than' ? '>' : '<');
      if ((kind === 'bigint' || kind === 'numeric') && typeof v === 'number' && Number.isFinite(v)) {
        return sql<boolean>`coalesce(${col}::numeric ${op} ${String(v)}::numeric, false)`;
      }
      const at = kind === 'timestamptz' ? storableTime(v) : null;
      if (at) return sql<boolean>`coalesce(${col} ${op} ${at}::timestamptz, false)`;
      throw new NotCompiled();
    }
    case 'is_set':
    case 'is_not_set': {
      const set = kind === 'text' ? sql<boolean>`(${col} IS NOT NULL AND ${col} <> '')` : sql<boolean>`(${col} IS NOT NULL)`;
      return rule.operator === 'is_set' ? set : sql<boolean>`(NOT ${set})`;
    }
    default:
      throw new NotCompiled();
  }
}
