// Event ingestion API (decisions.md §7): POST /email/events, GET /email/events/{id}
// and GET /email/events/{id}/decisions. Registered at /public/v1/email/events.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { sql } from 'kysely';
import { Type } from 'typebox';
import { notFound, validationFailed } from '../lib/errors.ts';
import { DateTime, StringOrNull, withErrors } from '../http/schemas.ts';
import { checkIngestInput, ingestEvent, INGEST_EVENT_NAMES } from './ingest.ts';
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
  event_payload: Type.Record(Type.String(), Type.Unknown(), { description: 'The webhook payload of the event (interface.md 6.3)' }),
});

const iso = (column: string) => sql.raw(`to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`);

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
      const { rows } = await sql<Record<string, unknown>>`
        SELECT e.id, e.team_id, e.name AS event_name, e.contact_id, coalesce(k.email, e.payload ->> 'email') AS email,
               e.idempotency_key, ${iso('e.occurred_at')} AS occurred_at, ${iso('e.created_at')} AS created_at,
               ${iso('e.processed_at')} AS processed_at, coalesce(e.input, e.payload) AS payload, e.payload AS event_payload
          FROM events e LEFT JOIN contacts k ON k.id = e.contact_id AND k.team_id = e.team_id
         WHERE e.team_id = ${request.auth!.teamId} AND e.id = ${id}`.execute(db);
      if (!rows[0]) throw notFound('event');
      return { ok: true as const, event: rows[0] as never };
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
      const event = await db.selectFrom('events').select(['id', 'processed_at']).where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
      if (!event) throw notFound('event');
      const { rows } = await sql<Record<string, unknown>>`
        SELECT d.id, d.campaign_id, c.name AS campaign_name, d.campaign_send_id, d.contact_id, d.decision, d.reason,
               d.email_send_log_id, l.status AS send_status, l.template_id, l.mail_account_id, ${iso('d.decided_at')} AS decided_at
          FROM campaign_decisions d
          LEFT JOIN campaigns c ON c.id = d.campaign_id AND c.team_id = d.team_id
          LEFT JOIN email_send_log l ON l.id = d.email_send_log_id AND l.team_id = d.team_id
         WHERE d.team_id = ${teamId} AND d.event_id = ${id}
         ORDER BY c.created_at, d.campaign_id`.execute(db);
      return { ok: true as const, event_id: id, processed: event.processed_at !== null, decisions: rows as never };
    },
  );
};
