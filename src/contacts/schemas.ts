import { Type, type Static, type TSchema } from 'typebox';
import { nullable, PageMeta, pageQuery, StringOrNull, UUID_PATTERN } from '../http/schemas.ts';

const SAFE_INT = { minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER };

const customFieldSchemas: Record<string, TSchema> = {};
for (let i = 1; i <= 5; i++) customFieldSchemas[`custom_str_${i}`] = Type.Optional(nullable(Type.String({ maxLength: 2000 })));
for (let i = 1; i <= 5; i++) customFieldSchemas[`custom_int_${i}`] = Type.Optional(nullable(Type.Integer(SAFE_INT)));
for (let i = 1; i <= 3; i++) customFieldSchemas[`custom_dec_${i}`] = Type.Optional(nullable(Type.Number({ minimum: -1e15, maximum: 1e15 })));
for (let i = 1; i <= 3; i++) customFieldSchemas[`custom_datetime_${i}`] = Type.Optional(nullable(Type.String({ format: 'date-time' })));
for (let i = 1; i <= 3; i++) customFieldSchemas[`custom_bool_${i}`] = Type.Optional(nullable(Type.Boolean()));

export const Tag = Type.String({ minLength: 1, maxLength: 64, pattern: '\\S' });
export const Tags = Type.Array(Tag, { maxItems: 100 });

export const ContactInput = Type.Object(
  {
    email: Type.String({ format: 'contact-email', maxLength: 320, description: 'Trimmed and lower-cased' }),
    first_name: Type.Optional(nullable(Type.String({ maxLength: 255 }))),
    last_name: Type.Optional(nullable(Type.String({ maxLength: 255 }))),
    phone: Type.Optional(nullable(Type.String({ maxLength: 64 }))),
    foreign_id: Type.Optional(nullable(Type.String({ maxLength: 255 }))),
    country_code: Type.Optional(nullable(Type.String({ format: 'country-code', description: 'ISO 3166-1 alpha-2' }))),
    ...customFieldSchemas,
    custom_fields: Type.Optional(
      Type.Object(customFieldSchemas, { additionalProperties: false, description: 'Custom fields, nested; same meaning as top level' }),
    ),
    tags: Type.Optional(Tags),
  },
  { additionalProperties: false },
);
export type ContactInputT = Static<typeof ContactInput> & Record<string, unknown>;

export const BulkUpsertBody = Type.Object(
  {
    contacts: Type.Array(ContactInput, { minItems: 1, maxItems: 1000 }),
    tags: Type.Optional(Tags),
  },
  { additionalProperties: false },
);

export const UnsubscribeBody = Type.Object(
  {
    email: Type.String({ format: 'contact-email', maxLength: 320 }),
    reason: Type.Optional(nullable(Type.String({ maxLength: 500 }))),
  },
  { additionalProperties: false },
);

export const BulkUnsubscribeBody = Type.Object(
  {
    emails: Type.Array(Type.String({ format: 'contact-email', maxLength: 320 }), { minItems: 1, maxItems: 1000 }),
    reason: Type.Optional(nullable(Type.String({ maxLength: 500 }))),
  },
  { additionalProperties: false },
);

export const UnsubscribesQuery = pageQuery(50, { search: Type.Optional(Type.String({ maxLength: 255 })) });

/** Contact as returned (docs/api.md, "Contacts"): every field a string, null where unknown. */
export const CONTACT_VIEW_FIELDS = [
  'id', 'team_id', 'email', 'status', 'first_name', 'last_name', 'phone', 'foreign_id', 'country_code',
  'is_email_valid', 'validation_method', 'validation_reason', 'validated_at',
  'created_at', 'updated_at', 'unsubscribed_at', 'unsubscribed_reason',
  'first_sent_at', 'last_sent_at', 'sent_count',
  'first_opened_at', 'last_opened_at', 'opens_count',
  'first_clicked_at', 'last_clicked_at', 'clicks_count',
  'first_lead_at', 'last_lead_at', 'leads_count',
  'first_sale_at', 'last_sale_at', 'sales_count',
  'first_bounced_at', 'last_bounced_at', 'hard_bounces_count', 'soft_bounces_count',
  ...Array.from({ length: 5 }, (_, i) => `custom_str_${i + 1}`),
  ...Array.from({ length: 5 }, (_, i) => `custom_int_${i + 1}`),
  ...Array.from({ length: 3 }, (_, i) => `custom_dec_${i + 1}`),
  ...Array.from({ length: 3 }, (_, i) => `custom_datetime_${i + 1}`),
  ...Array.from({ length: 3 }, (_, i) => `custom_bool_${i + 1}`),
] as const;

export const ContactView = Type.Object({
  ...Object.fromEntries(CONTACT_VIEW_FIELDS.map((f) => [f, StringOrNull])),
  tags: Type.Array(Type.String()),
});

export const UpsertResponse = Type.Object({ ok: Type.Literal(true), contact: ContactView, created: Type.Boolean() });
export const BulkUpsertResponse = Type.Object({
  ok: Type.Literal(true),
  summary: Type.Object({ received: Type.Integer(), created: Type.Integer(), updated: Type.Integer(), unchanged: Type.Integer() }),
});
export const UnsubscribeResponse = Type.Object({ ok: Type.Literal(true), contact: ContactView });
export const BulkUnsubscribeResponse = Type.Object({
  ok: Type.Literal(true),
  summary: Type.Object({ received: Type.Integer(), unsubscribed: Type.Integer(), unchanged: Type.Integer() }),
});
export const UnsubscribesResponse = Type.Object({ ok: Type.Literal(true), contacts: Type.Array(ContactView), meta: PageMeta });

// --- The management routes (list, get, patch, erase) ---

export const CONTACT_STATUSES = ['active', 'unsubscribed', 'bounced', 'complained'] as const;

export const ContactListQuery = pageQuery(20, {
  status: Type.Optional(Type.Enum([...CONTACT_STATUSES])),
  tag: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'Contacts that have this tag (exact).' })),
  search: Type.Optional(Type.String({ minLength: 1, maxLength: 320, description: 'Contacts whose e-mail address starts with this text (case-insensitive; % and _ are literal).' })),
  created_after: Type.Optional(Type.String({ format: 'date-time', description: 'Created at or after this time.' })),
  created_before: Type.Optional(Type.String({ format: 'date-time', description: 'Created before this time (exclusive).' })),
});
export type ContactListQueryT = Static<typeof ContactListQuery>;

export const ContactIdParams = Type.Object({ id: Type.String({ pattern: UUID_PATTERN }) });
export const ContactEmailQuery = Type.Object(
  { email: Type.String({ minLength: 1, maxLength: 320, description: 'The address, matched trimmed and lower-cased' }) },
  { additionalProperties: true },
);

const { email: _email, tags: _tags, ...patchable } = ContactInput.properties;
export const ContactPatchBody = Type.Object(
  {
    ...patchable,
    tags: Type.Optional(Type.Array(Tag, { maxItems: 100, description: 'Replaces every tag of the contact.' })),
    add_tags: Type.Optional(Type.Array(Tag, { maxItems: 100, description: 'Added to the stored tags (not with `tags`).' })),
    remove_tags: Type.Optional(Type.Array(Tag, { maxItems: 100, description: 'Removed from the stored tags (not with `tags`); absent tags are ignored.' })),
  },
  { additionalProperties: false },
);
export type ContactPatchBodyT = Static<typeof ContactPatchBody> & Record<string, unknown>;

export const EraseBody = Type.Object(
  { email: Type.String({ format: 'contact-email', maxLength: 320, description: 'Trimmed and lower-cased' }) },
  { additionalProperties: false },
);

export const ERASED_KINDS = [
  'contacts', 'messages', 'tracking_hits', 'events', 'webhook_deliveries', 'leads', 'sales',
  'campaign_decisions', 'suppressions', 'idempotency_records', 'imports',
] as const;
export type ErasedKind = (typeof ERASED_KINDS)[number];

export const ContactListResponse = Type.Object({ ok: Type.Literal(true), contacts: Type.Array(ContactView), meta: PageMeta });
export const ContactResponse = Type.Object({ ok: Type.Literal(true), contact: ContactView });
export const PatchResponse = Type.Object({ ok: Type.Literal(true), contact: ContactView, changed: Type.Boolean() });
export const EraseResponse = Type.Object({
  ok: Type.Literal(true),
  erased: Type.Object(
    Object.fromEntries(ERASED_KINDS.map((k) => [k, Type.Integer({ minimum: 0 })])) as Record<ErasedKind, ReturnType<typeof Type.Integer>>,
    { description: 'Rows removed or scrubbed of the address, per kind. Messages are kept, anonymised, so counts stay.' },
  ),
});

/** GET /email/contacts/{id}/timeline: keyset pages (a cursor, not page numbers; see docs/decisions.md "Contact timeline"). */
export const TimelineQuery = Type.Object(
  {
    per_page: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    order: Type.Optional(Type.Union([Type.Literal('desc'), Type.Literal('asc')], { default: 'desc', description: 'Newest first (`desc`, the default) or oldest first.' })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'The `meta.next_cursor` of the previous page; absent for the first page.' })),
  },
  { additionalProperties: true },
);

export const TimelineResponse = Type.Object({
  ok: Type.Literal(true),
  timeline: Type.Array(Type.Object({
    at: Type.String({ format: 'date-time' }),
    type: Type.String(),
    detail: Type.Object({}, { additionalProperties: true }),
  })),
  meta: Type.Object({
    current_page: Type.String(),
    per_page: Type.Integer(),
    order: Type.String(),
    next_cursor: StringOrNull,
  }),
});
