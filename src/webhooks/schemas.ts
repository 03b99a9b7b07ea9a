// Request and response schemas of the webhook API (docs/api.md, "Webhooks").
import { Type } from 'typebox';
import { DateTime, nullable, pageQuery, PageMeta, StringOrNull, UUID_PATTERN } from '../http/schemas.ts';
import { WEBHOOK_EVENTS, WEBHOOK_SOURCES } from './catalog.ts';

// enum rather than a union of literals: one clear error per bad value.
const EventName = Type.Unsafe<string>({ type: 'string', enum: [...WEBHOOK_EVENTS], description: 'An event of the webhook event catalog.' });
const Source = Type.Unsafe<string | null>({
  type: ['string', 'null'],
  enum: [...WEBHOOK_SOURCES, null],
  description: 'Integration owner (n8n, zapier, make, internal) or null; non-null locks the webhook.',
});
const Url = Type.String({ minLength: 1, maxLength: 2048, description: 'https URL whose host resolves only to public addresses.' });
const Events = Type.Array(EventName, { minItems: 1, maxItems: 100 });
const Description = nullable(Type.String({ maxLength: 1000 }));

export const CreateWebhookBody = Type.Object(
  {
    url: Url,
    events: Events,
    source: Type.Optional(Source),
    description: Type.Optional(Description),
    is_enabled: Type.Optional(Type.Boolean({ description: 'Default true. A disabled webhook can always be created.' })),
  },
  { additionalProperties: false },
);

export const UpdateWebhookBody = Type.Object(
  {
    url: Type.Optional(Url),
    events: Type.Optional(Events),
    source: Type.Optional(Source),
    description: Type.Optional(Description),
    is_enabled: Type.Optional(Type.Boolean({ description: 'true on a disabled webhook enables it (limit check, new secret).' })),
  },
  { additionalProperties: false },
);

export const WebhookParams = Type.Object({ id: Type.String({ pattern: UUID_PATTERN }) });
export const DeliveryParams = Type.Object({ id: Type.String({ pattern: UUID_PATTERN }), delivery_id: Type.String({ pattern: UUID_PATTERN }) });

const WebhookFields = {
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  is_enabled: Type.Boolean(),
  source: StringOrNull,
  locked: Type.Boolean(),
  description: StringOrNull,
  last_success_at: StringOrNull,
  pending_count: Type.Integer({
    description: 'Deliveries waiting to be sent: retries not yet due and, while disabled, the paused backlog.',
  }),
  created_at: Type.String(),
  updated_at: Type.String(),
};
export const Webhook = Type.Object({ ...WebhookFields, secret: Type.String() });
export const WebhookListItem = Type.Object(WebhookFields);

export const WebhookResponse = Type.Object({ ok: Type.Literal(true), webhook: Webhook });
export const WebhookListResponse = Type.Object({ ok: Type.Literal(true), webhooks: Type.Array(WebhookListItem), meta: PageMeta });
export const ListWebhooksQuery = pageQuery(20, {});

export const Delivery = Type.Object({
  id: Type.String({ description: 'The envelope id.' }),
  webhook_id: Type.String(),
  event: Type.String(),
  payload: Type.Object({}, { additionalProperties: true, description: 'The envelope as sent.' }),
  status: Type.Union([Type.Literal('pending'), Type.Literal('success'), Type.Literal('failed')]),
  response_code: Type.Union([Type.Integer(), Type.Null()]),
  response_body: StringOrNull,
  attempts: Type.Integer(),
  attempted_at: Type.Array(Type.String()),
  attempt_log: Type.Array(
    Type.Object({
      at: Type.String(),
      response_code: Type.Union([Type.Integer(), Type.Null()]),
      duration_ms: Type.Integer(),
      error: StringOrNull,
    }),
    { description: 'Every attempt: time, response code, duration and error.' },
  ),
  next_attempt_at: StringOrNull,
  last_error: StringOrNull,
  simulated: Type.Boolean({ description: 'Made by POST /webhooks/simulate: a sample envelope sent as a test, not a real event.' }),
  created_at: Type.String(),
  updated_at: Type.String(),
});
export const DeliveryResponse = Type.Object({ ok: Type.Literal(true), delivery: Delivery });
/** Resend: the attempt it queued, and the delivery (now `pending`; its response fields are still those of the last attempt). */
export const ResendResponse = Type.Object({
  ok: Type.Literal(true),
  attempt: Type.Object(
    {
      number: Type.Integer({ description: 'Number of the queued attempt among all attempts of this delivery (attempts so far + 1).' }),
      status: Type.Literal('queued'),
      due_at: Type.String({ description: 'When it is due: now, or as soon as the webhook is enabled again.' }),
      max_attempts: Type.Integer({ description: 'Attempts of the new sequence at most, this one included.' }),
    },
    { title: 'QueuedAttempt' },
  ),
  delivery: Delivery,
});
export const DeliveryListResponse = Type.Object({ ok: Type.Literal(true), deliveries: Type.Array(Delivery), meta: PageMeta });
export const ListDeliveriesQuery = pageQuery(20, {
  status: Type.Optional(Type.Union([Type.Literal('pending'), Type.Literal('success'), Type.Literal('failed')])),
  event: Type.Optional(EventName),
});

export const SimulateBody = Type.Object(
  {
    webhook_id: Type.Optional(Type.String({ pattern: UUID_PATTERN })),
    event: EventName,
  },
  { additionalProperties: false },
);
export const SimulateResponse = Type.Union([
  DeliveryResponse,
  Type.Object({ ok: Type.Literal(true), payload: Type.Object({}, { additionalProperties: true }) }),
]);

export const RecoverBody = Type.Object(
  {
    since: Type.Unsafe<string>({ ...DateTime, description: 'Failed deliveries created at or after this time; at most 14 days back.' }),
    until: Type.Optional(Type.Unsafe<string>({ ...DateTime, description: 'Only those created before this time (default: now).' })),
  },
  { additionalProperties: false },
);
export const RecoverResponse = Type.Object({
  ok: Type.Literal(true),
  queued: Type.Integer({ description: 'Failed deliveries queued for a new attempt sequence.' }),
});
