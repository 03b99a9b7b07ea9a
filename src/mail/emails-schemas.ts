// Schemas of the message log API (/email/emails): transactional submit and
// batch, and the one log of every message of a team, campaign mail included.
import { Type, type Static } from 'typebox';
import { DateTime, nullable, PageMeta, pageQuery, StringOrNull, UUID_PATTERN } from '../http/schemas.ts';

const Id = Type.String({ pattern: UUID_PATTERN });
const Address = Type.String({ format: 'contact-email', maxLength: 320 });

// Optional fields also take null (clients that send every field of their form
// send the empty ones as null): null means "not given".
export const SubmitBody = Type.Object(
  {
    template_id: Id,
    mail_account_id: Id,
    to_email: Address,
    to_name: Type.Optional(nullable(Type.String({ maxLength: 255 }))),
    from_name: Type.Optional(nullable(Type.String({ maxLength: 255, description: "Overrides the mail account's from name." }))),
    contact_id: Type.Optional(nullable(Type.String({
      pattern: UUID_PATTERN, description: 'The contact to render as `contact`; default: the team\'s contact with `to_email`, if any. None is created.',
    }))),
    variables: Type.Optional(nullable(Type.Object({}, {
      additionalProperties: true,
      description: 'Template variables: at the top level of the Liquid context (`{{ order_id }}`) and under `variables`.',
    }))),
    subject: Type.Optional(nullable(Type.String({ maxLength: 998, description: "Overrides the template's subject (Liquid, like it)." }))),
    reply_to: Type.Optional(nullable(Address)),
    track_opens: Type.Optional(Type.Boolean({ default: false })),
    track_clicks: Type.Optional(Type.Boolean({ default: false })),
    idempotency_key: Type.Optional(nullable(Type.String({
      minLength: 1, maxLength: 255,
      description: 'Also accepted as the `Idempotency-Key` header. The same key within 24 hours answers the first answer and sends nothing; with a different body it is 409.',
    }))),
  },
  { additionalProperties: false },
);
export type SubmitInput = Static<typeof SubmitBody>;

export const BATCH_MAX = 500;
export const BatchBody = Type.Object(
  { emails: Type.Array(SubmitBody, { minItems: 1, maxItems: BATCH_MAX }) },
  { additionalProperties: false },
);

export const EMAIL_STATUSES = ['queued', 'sent', 'delivered', 'deferred', 'bounced', 'failed', 'suppressed', 'cancelled'] as const;
export type EmailStatus = (typeof EMAIL_STATUSES)[number];

export const Email = Type.Object(
  {
    id: Type.String(),
    source: Type.Enum(['transactional', 'campaign']),
    status: Type.Enum([...EMAIL_STATUSES]),
    to_email: Type.String(),
    to_name: StringOrNull,
    template_id: StringOrNull,
    mail_account_id: StringOrNull,
    contact_id: StringOrNull,
    campaign_id: StringOrNull,
    campaign_send_id: StringOrNull,
    subject: StringOrNull,
    message_id: StringOrNull,
    attempts: Type.Integer(),
    created_at: DateTime,
    updated_at: DateTime,
    sent_at: nullable(DateTime),
  },
  { title: 'Email' },
);

export const EmailEvent = Type.Object({
  type: Type.String({ description: 'queued, sent, deferred, bounced, failed, suppressed, cancelled, opened, clicked (with `is_bot` in detail)' }),
  at: DateTime,
  detail: Type.Object({}, { additionalProperties: true }),
});

export const EmailWithEvents = Type.Object(
  { ...Email.properties, events: Type.Array(EmailEvent) },
  { title: 'EmailWithEvents' },
);

export const EmailResponse = Type.Object({ ok: Type.Literal(true), email: Email });
export const EmailDetailResponse = Type.Object({ ok: Type.Literal(true), email: EmailWithEvents });
export const BatchResponse = Type.Object({
  ok: Type.Literal(true),
  emails: Type.Array(Type.Object({ id: Type.String(), status: Type.Enum(['queued', 'suppressed']) })),
});
export const EmailListResponse = Type.Object({ ok: Type.Literal(true), emails: Type.Array(Email), meta: PageMeta });

export const ListQuery = pageQuery(20, {
  status: Type.Optional(Type.Enum([...EMAIL_STATUSES])),
  source: Type.Optional(Type.Enum(['transactional', 'campaign'])),
  to_email: Type.Optional(Type.String({ maxLength: 320 })),
});

export const IdParams = Type.Object({ id: Type.String({ pattern: UUID_PATTERN }) });

export const IdempotencyHeaders = Type.Object(
  { 'idempotency-key': Type.Optional(Type.String({ minLength: 1, maxLength: 255 })) },
  { additionalProperties: true },
);
