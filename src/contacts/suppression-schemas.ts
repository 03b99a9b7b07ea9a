// Schemas of the suppression list API (/email/suppressions).
import { Type } from 'typebox';
import { DateTime, PageMeta, pageQuery } from '../http/schemas.ts';
import { CLIENT_REASONS, SUPPRESSION_REASONS } from './suppressions.ts';

export const SUPPRESSIONS_MAX = 1000;

const Address = Type.String({ format: 'contact-email', maxLength: 320, description: 'Trimmed and lower-cased' });
const ClientReason = Type.Enum([...CLIENT_REASONS], {
  description:
    '`manual` (the default): the team does not want to mail the address. `unsubscribed`, `bounced_hard`, `complained`: ' +
    'imported from elsewhere; the team cannot remove an `unsubscribed` or `complained` entry later, so give them only for what the recipient did.',
});

export const AddSuppressionsBody = Type.Object(
  {
    email: Type.Optional(Address),
    reason: Type.Optional(ClientReason),
    suppressions: Type.Optional(Type.Array(
      Type.Object({ email: Address, reason: Type.Optional(ClientReason) }, { additionalProperties: false }),
      { minItems: 1, maxItems: SUPPRESSIONS_MAX, description: 'Up to 1,000 entries; an entry without `reason` takes the top-level one (default `manual`).' },
    )),
  },
  { additionalProperties: false },
);

export const Suppression = Type.Object(
  {
    id: Type.String(),
    email: Type.Unsafe<string | null>({ type: ['string', 'null'], description: 'null for an erased address: only its keyed hash is kept' }),
    reason: Type.Enum([...SUPPRESSION_REASONS], { description: 'The reason in force (the strongest recorded)' }),
    reasons: Type.Array(Type.String(), { description: 'Every reason recorded for the address, strongest first' }),
    message_id: Type.Unsafe<string | null>({ type: ['string', 'null'], description: 'The message (e-mail id) that caused the entry, when one did' }),
    created_at: DateTime,
    updated_at: DateTime,
  },
  { title: 'Suppression' },
);

export const AddSuppressionsResponse = Type.Object({
  ok: Type.Literal(true),
  summary: Type.Object({
    received: Type.Integer(),
    added: Type.Integer({ description: 'addresses that had no entry' }),
    updated: Type.Integer({ description: 'entries that took a stronger reason or remembered a new one' }),
    unchanged: Type.Integer(),
    contacts_changed: Type.Integer({ description: '`active` contacts that became unsubscribed, bounced or complained' }),
  }),
  suppressions: Type.Array(Suppression),
});

export const SuppressionsQuery = pageQuery(20, {
  reason: Type.Optional(Type.Enum([...SUPPRESSION_REASONS])),
  search: Type.Optional(Type.String({ maxLength: 320, description: 'E-mail prefix, case-insensitive; erased entries never match' })),
  created_from: Type.Optional(Type.String({ format: 'date-time', description: 'Entries created at or after this time' })),
  created_to: Type.Optional(Type.String({ format: 'date-time', description: 'Entries created before this time' })),
});

export const SuppressionsResponse = Type.Object({ ok: Type.Literal(true), suppressions: Type.Array(Suppression), meta: PageMeta });

export const EmailParams = Type.Object({ email: Type.String({ format: 'contact-email', maxLength: 320 }) });

export const RemoveSuppressionResponse = Type.Object({
  ok: Type.Literal(true),
  removed: Type.Array(Type.String(), { description: 'The reasons removed (manual, bounced_hard, soft_bounce)' }),
  suppression: Type.Union([Suppression, Type.Null()], {
    description: 'What still suppresses the address (an unsubscribe the entry also remembered, an erased entry), or null',
  }),
});
