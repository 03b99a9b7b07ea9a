// The writable contact fields (docs/api.md, "Contacts") with their SQL types. The
// bulk upsert statement and the input schema are both generated from this list.
export type FieldKind = 'text' | 'bigint' | 'numeric' | 'timestamptz' | 'boolean';

const range = (prefix: string, n: number, kind: FieldKind) =>
  Array.from({ length: n }, (_, i) => ({ name: `${prefix}_${i + 1}`, kind }));

export const CUSTOM_FIELDS: { name: string; kind: FieldKind }[] = [
  ...range('custom_str', 5, 'text'),
  ...range('custom_int', 5, 'bigint'),
  ...range('custom_dec', 3, 'numeric'),
  ...range('custom_datetime', 3, 'timestamptz'),
  ...range('custom_bool', 3, 'boolean'),
];

export const CONTACT_FIELDS: { name: string; kind: FieldKind }[] = [
  { name: 'first_name', kind: 'text' },
  { name: 'last_name', kind: 'text' },
  { name: 'phone', kind: 'text' },
  { name: 'foreign_id', kind: 'text' },
  { name: 'country_code', kind: 'text' },
  ...CUSTOM_FIELDS,
];

export const CUSTOM_FIELD_NAMES = new Set(CUSTOM_FIELDS.map((f) => f.name));
