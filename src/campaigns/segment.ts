// segment_query.rules: which contacts a campaign mails. Every rule must hold
// (AND). Rules are checked when the campaign is created (422 naming the bad
// rule) and evaluated by the engine on the contact row it has already loaded,
// so a segment costs no extra query per decision.
import type { ErrorDetail } from '../http/errors.ts';
import { CONTACT_FIELDS } from '../contacts/fields.ts';

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

export type SegmentRule = { field?: string; operator: SegmentOperator; value?: unknown };

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
const FIELD_KINDS = new Map<string, string>([...CONTACT_FIELDS.map((f) => [f.name, f.kind] as const), ...Object.entries(EXTRA_FIELDS)]);

const TAG_OPERATORS = new Set<SegmentOperator>(['has_tag', 'not_has_tag']);
const NO_VALUE = new Set<SegmentOperator>(['is_set', 'is_not_set']);
const ORDERED = new Set<SegmentOperator>(['greater_than', 'less_than']);

/** One detail per malformed rule (field `segment_query.rules[i]…`); empty when all are valid. */
export function checkSegmentRules(rules: unknown[]): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  rules.forEach((raw, i) => {
    const at = `segment_query.rules[${i}]`;
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
      details.push({ field: at, message: 'must be an object {field, operator, value}' });
      return;
    }
    const rule = raw as Record<string, unknown>;
    const extra = Object.keys(rule).filter((k) => !['field', 'operator', 'value'].includes(k));
    if (extra.length) details.push({ field: `${at}.${extra[0]}`, message: 'is not an allowed field' });
    const op = rule.operator as SegmentOperator;
    if (!SEGMENT_OPERATORS.includes(op)) {
      details.push({ field: `${at}.operator`, message: `must be one of ${SEGMENT_OPERATORS.join(', ')}` });
      return;
    }
    if (TAG_OPERATORS.has(op)) {
      if (typeof rule.value !== 'string' || rule.value === '') details.push({ field: `${at}.value`, message: 'must be a tag (non-empty string)' });
      return;
    }
    const kind = typeof rule.field === 'string' ? FIELD_KINDS.get(rule.field) : undefined;
    if (!kind) {
      details.push({ field: `${at}.field`, message: 'must name a contact field (e.g. first_name, custom_int_1, country_code)' });
      return;
    }
    if (NO_VALUE.has(op)) return;
    const value = rule.value;
    if (op === 'contains' || op === 'not_contains') {
      if (typeof value !== 'string' || value === '') details.push({ field: `${at}.value`, message: 'must be a non-empty string' });
    } else if (ORDERED.has(op)) {
      if (kind === 'timestamptz' ? typeof value !== 'string' || Number.isNaN(Date.parse(value)) : typeof value !== 'number' || !Number.isFinite(value)) {
        details.push({ field: `${at}.value`, message: kind === 'timestamptz' ? 'must be an ISO 8601 date-time' : 'must be a number' });
      } else if (kind === 'text' || kind === 'boolean') {
        details.push({ field: `${at}.operator`, message: `${op} needs a number or date-time field` });
      }
    } else if (value !== null && !['string', 'number', 'boolean'].includes(typeof value)) {
      details.push({ field: `${at}.value`, message: 'must be a string, number, boolean or null' });
    }
  });
  return details;
}

function comparable(v: unknown): number | string | boolean | null {
  if (v === null || v === undefined) return null;
  if (v instanceof Date) return v.getTime();
  return v as string | number | boolean;
}

/** Equality across the types a rule and a row may carry (numeric columns come as strings). */
function same(actual: unknown, expected: unknown, kind: string | undefined): boolean {
  const a = comparable(actual);
  if (expected === null) return a === null;
  if (a === null) return false;
  if (kind === 'timestamptz') return a === Date.parse(String(expected));
  if (kind === 'bigint' || kind === 'numeric') return Number(a) === Number(expected);
  if (kind === 'boolean') return a === expected;
  return String(a).toLowerCase() === String(expected).toLowerCase();
}

function ordered(actual: unknown, expected: unknown, kind: string | undefined): number | null {
  const a = comparable(actual);
  if (a === null) return null;
  const x = Number(a);
  const y = kind === 'timestamptz' ? Date.parse(String(expected)) : Number(expected);
  return Number.isNaN(x) || Number.isNaN(y) ? null : x - y;
}

/** Whether the contact matches every rule. A rule that is malformed (stored before checks existed) never matches. */
export function matchesSegment(contact: Record<string, unknown>, rules: unknown[]): boolean {
  return rules.every((raw) => {
    const rule = raw as SegmentRule;
    if (!rule || typeof rule !== 'object') return false;
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
        const has = actual != null && String(actual).toLowerCase().includes(String(rule.value).toLowerCase());
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
  });
}
