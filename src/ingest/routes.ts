// Event ingestion API (docs/api.md, "Events and decisions"): POST /email/events, GET /email/events/{id}
// and GET /email/events/{id}/decisions. Registered at /public/v1/email/events.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { notFound, validationFailed } from '../lib/errors.ts';
import { DateTime, StringOrNull, withErrors } from '../http/schemas.ts';
import { checkIngestInput, ingestEvent, INGEST_EVENT_NAMES } from './ingest.ts';
import { findEventDecisions, findEventView } from './queries.ts';
import { DecisionObject } from '../campaigns/schemas.ts';
import { UUID_RE } from '../http/schemas.ts';

const TAGS = ['events'];

export const IngestBody = Type.Object(
  {
    event_name: Type.Enum([...INGEST_EVENT_NAMES]),
    email: Type.Optional(Type.String({ format: 'contact-email', description: 'The contact; created when unknown' })),
    idempotency_key: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'The same key again returns the first event id and does nothing more' })),
    occurred_at: Type.Optional(Type.String({ format: 'date-time', description: 'When it happened (default: now)' })),
    payload: Type.Optional(
      Type.Record(Type.String(), Type.Unknown(), {
        description:
          'Free-form; templates read it as `event.payload`. lead.created/sale.created read `source`, `campaign_id`, ' +
          '`campaign_send_id`, and for a sale `amount` (number) and `currency` (ISO 4217); contact.unsubscribed reads `reason`.',
      }),
    ),
  },
  { additionalProperties: false },
);

const Accepted = Type.Object({ ok: Type.Literal(true), event_id: Type.String() });
const Params = Type.Object({ id: Type.String({ description: 'Event id (UUID)' }) });

const EventObject = Type.Object({
  id: Type.String(),
  team_id: Type.String(),
  event_name: Type.String(),
  contact_id: StringOrNull,
  email: StringOrNull,
  idempotency_key: StringOrNull,
  occurred_at: DateTime,
  created_at: DateTime,
  processed_at: Type.Union([DateTime, Type.Null()]),
  payload: Type.Record(Type.String(), Type.Unknown(), { description: 'What the client sent (ingested events), else the event payload' }),
  event_payload: Type.Record(Type.String(), Type.Unknown(), { description: 'The webhook payload of the event, as webhooks receive it' }),
});


export const ingestRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db } = app.deps;

  app.post(
    '/',
    {
      schema: {
        tags: TAGS,
        summary: 'Ingest an event',
        description:
          'Records the event and answers at once; campaigns are decided in the background. `email` or `idempotency_key` is required ' +
          '(`email` for contact.saved and contact.unsubscribed). lead.created and sale.created create the contact when needed and ' +
          'update its counters. The same `idempotency_key` twice returns the first event id and does nothing more.',
        body: IngestBody,
        response: withErrors({ 202: Accepted }),
      },
    },
    async (request, reply) => {
      const details = checkIngestInput(request.body);
      if (details.length) throw validationFailed(details, 'invalid event');
      const { eventId } = await ingestEvent(db, request.auth!.teamId, request.body);
      reply.code(202);
      return { ok: true as const, event_id: eventId };
    },
  );

  app.get(
    '/:id',
    {
      schema: {
        tags: TAGS,
        summary: 'Get an event',
        params: Params,
        response: withErrors({ 200: Type.Object({ ok: Type.Literal(true), event: EventObject }) }, [404]),
      },
    },
    async (request) => {
      const id = request.params.id;
      if (!UUID_RE.test(id)) throw notFound('event');
      const event = await findEventView(db, request.auth!.teamId, id);
      if (!event) throw notFound('event');
      return { ok: true as const, event: event as never };
    },
  );

  app.get(
    '/:id/decisions',
    {
      schema: {
        tags: TAGS,
        summary: "List an event's campaign decisions",
        description:
          'One entry per campaign the event concerned: `send` (with the e-mail and its status) or `skip` with the reason. ' +
          'Empty until the event is processed (`processed` false) or when no campaign is triggered by it.',
        params: Params,
        response: withErrors(
          {
            200: Type.Object({
              ok: Type.Literal(true),
              event_id: Type.String(),
              processed: Type.Boolean(),
              decisions: Type.Array(DecisionObject),
            }),
          },
          [404],
        ),
      },
    },
    async (request) => {
      const id = request.params.id;
      const teamId = request.auth!.teamId;
      if (!UUID_RE.test(id)) throw notFound('event');
      const found = await findEventDecisions(db, teamId, id);
      if (!found) throw notFound('event');
      return { ok: true as const, event_id: id, processed: found.processed, decisions: found.decisions as never };
    },
  );
};
