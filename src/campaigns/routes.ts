// Event-triggered campaigns (docs/api.md, "Campaigns"): create, list, get,
// update, delete, and start/stop of the latest send. Registered at
// /public/v1/email/campaigns.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { AppError, notFound, validationFailed } from '../lib/errors.ts';
import { PageMeta, pageMeta, withErrors } from '../http/schemas.ts';
import { getCampaign, listCampaignDecisions, listCampaigns, transitionLatestSend, type SendStatus } from './queries.ts';
import { createEventCampaign } from './create.ts';
import {
  CampaignListResponse,
  CampaignParams,
  CampaignResponse,
  CreateCampaignBody,
  ListCampaignsQuery,
  UpdateCampaignBody,
  SubmitBody,
  type CampaignValue,
} from './schemas.ts';
import { normalizeEvent } from './send-data.ts';
import { submitToCampaign } from './submit.ts';
import { deleteCampaign, updateCampaign } from './manage.ts';
import { Campaign, CampaignDecisionObject, DecisionObject, ListDecisionsQuery } from './schemas.ts';
import { cancelBroadcast, pauseOrResume } from './broadcast.ts';
import { Type } from 'typebox';
import { UUID_RE } from '../http/schemas.ts';

const TAGS = ['campaigns'];

// Path ids are checked here, not by the schema: a malformed id names no
// campaign, so it is a 404 like an unknown one (never a 422, never a SQL error).

const TRANSITIONS = {
  start: { from: 'paused', to: 'active', verb: 'started' },
  stop: { from: 'active', to: 'paused', verb: 'stopped' },
} as const satisfies Record<string, { from: SendStatus; to: SendStatus; verb: string }>;

export const campaignsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db } = app.deps;

  app.post(
    '/',
    {
      schema: {
        tags: TAGS,
        summary: 'Create an event-triggered campaign',
        description:
          'Creates the campaign and its first send (status `active`) in one transaction. ' +
          '`template_ids` must name active templates and `mail_account_ids` active mail accounts of this team; ' +
          'otherwise 422 names each bad id. Events may use the dotted or the underscore spelling; the dotted form is stored.',
        body: CreateCampaignBody,
        response: withErrors({ 201: CampaignResponse }),
      },
    },
    async (request, reply) => {
      const campaign = await createEventCampaign(db, request.auth!.teamId, request.body);
      reply.code(201);
      return { ok: true as const, campaign };
    },
  );

  app.get(
    '/',
    {
      schema: {
        tags: TAGS,
        summary: 'List campaigns',
        description: "The team's campaigns, newest first, each with its sends (newest first).",
        querystring: ListCampaignsQuery,
        response: withErrors({ 200: CampaignListResponse }),
      },
    },
    async (request) => {
      const page = request.query.page ?? 1;
      const perPage = request.query.per_page ?? 15;
      const search = request.query.search;
      const { campaigns, total } = await listCampaigns(db, request.auth!.teamId, { search, page, perPage });
      return { ok: true as const, campaigns, meta: pageMeta(page, perPage, total) };
    },
  );

  app.get(
    '/:id',
    {
      schema: {
        tags: TAGS,
        summary: 'Get a campaign',
        params: CampaignParams,
        response: withErrors({ 200: CampaignResponse }, [404]),
      },
    },
    async (request) => {
      const campaign = UUID_RE.test(request.params.id) ? await getCampaign(db, request.auth!.teamId, request.params.id) : undefined;
      if (!campaign) throw notFound('campaign');
      return { ok: true as const, campaign };
    },
  );

  app.get(
    '/:id/decisions',
    {
      schema: {
        tags: TAGS,
        summary: "List a campaign's decisions",
        description:
          'Every decision of the campaign, newest first: for an event-triggered campaign one per event, for a broadcast or an ' +
          'automation one per recipient of a send. `send` carries the e-mail and its status; `skip` the reason (suppressed, ' +
          'unsubscribed, verification status, verification budget, daily limit, …). Filters: `decision`, `reason`, `send_id`.',
        params: CampaignParams,
        querystring: ListDecisionsQuery,
        response: withErrors(
          { 200: Type.Object({ ok: Type.Literal(true), decisions: Type.Array(CampaignDecisionObject), meta: PageMeta }) },
          [404],
        ),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const id = request.params.id.toLowerCase();
      if (!UUID_RE.test(id) || !(await getCampaign(db, teamId, id))) throw notFound('campaign');
      const q = request.query;
      const page = q.page ?? 1;
      const perPage = q.per_page ?? 20;
      const { rows, total } = await listCampaignDecisions(db, teamId, id, {
        page, perPage, decision: q.decision, reason: q.reason, sendId: q.send_id?.toLowerCase(),
      });
      return { ok: true as const, decisions: rows as never, meta: pageMeta(page, perPage, total) };
    },
  );

  app.patch(
    '/:id',
    {
      schema: {
        tags: TAGS,
        summary: 'Update a campaign',
        description:
          'Changes any field of create (at least one): name, templates, mail accounts, trigger events, sender and reply-to, tracking, ' +
          '`event_triggered_send` (cooldown, daily cap, enabled; merged field by field) and segment rules. Lists given replace the ' +
          'stored ones. Checked as at create: ids that are not active templates or mail accounts of this team are 422, each named. ' +
          'The latest send takes the new settings: the next trigger is decided with them. Messages already queued keep their ' +
          'template and account.',
        params: CampaignParams,
        body: UpdateCampaignBody,
        response: withErrors({ 200: CampaignResponse }, [404]),
      },
    },
    async (request) => {
      const id = request.params.id;
      if (!UUID_RE.test(id)) throw notFound('campaign');
      const campaign = await updateCampaign(db, request.auth!.teamId, id.toLowerCase(), request.body);
      return { ok: true as const, campaign };
    },
  );

  app.delete(
    '/:id',
    {
      schema: {
        tags: TAGS,
        summary: 'Delete a campaign',
        description:
          'The campaign stops triggering at once. Its messages not yet being sent (`queued`, or `deferred` waiting for a retry) ' +
          'become `cancelled`; a message already being handed to the SMTP server finishes. The message log keeps every message ' +
          'of the campaign (with its `campaign_id`) for stats; the campaign itself answers 404 from then on.',
        params: CampaignParams,
        response: withErrors(
          { 200: Type.Object({ ok: Type.Literal(true), cancelled: Type.Integer({ description: 'Queued messages cancelled.' }) }) },
          [404],
        ),
      },
    },
    async (request) => {
      const id = request.params.id;
      if (!UUID_RE.test(id)) throw notFound('campaign');
      const { cancelled } = await deleteCampaign(db, request.auth!.teamId, id.toLowerCase());
      return { ok: true as const, cancelled };
    },
  );

  for (const action of ['start', 'stop'] as const) {
    const { from, to, verb } = TRANSITIONS[action];
    app.post(
      `/:id/${action}`,
      {
        schema: {
          tags: TAGS,
          summary: action === 'start' ? 'Start (resume) a campaign' : 'Stop (pause) a campaign',
          description:
            `Moves the campaign's latest send from \`${from}\` to \`${to}\`. ` +
            `A send that is already \`${to}\` is left as it is (200). A \`completed\` or \`failed\` send is 409. ` +
            (action === 'start'
              ? 'A paused broadcast resumes (`sending`): its list goes on and its queued messages are sent.'
              : 'A `scheduled` or `sending` broadcast pauses: its messages not yet claimed wait, `queued`.'),
          params: CampaignParams,
          response: withErrors({ 200: CampaignResponse }, [404, 409]),
        },
      },
      async (request) => {
        const teamId = request.auth!.teamId;
        const id = request.params.id;
        if (!UUID_RE.test(id)) throw notFound('campaign');
        const b = await pauseOrResume(db, teamId, id.toLowerCase(), action);
        if (b.kind === 'conflict') throw new AppError('CONFLICT', `campaign send is ${b.status}; it cannot be ${verb}`);
        if (b.kind === 'not_broadcast') await transition(teamId, id, from, to, verb);
        const campaign = await getCampaign(db, teamId, id);
        if (!campaign) throw notFound('campaign');
        return { ok: true as const, campaign };
      },
    );
  }

  app.post(
    '/:id/cancel',
    {
      schema: {
        tags: TAGS,
        summary: 'Cancel a broadcast',
        description:
          'Ends the latest send of a broadcast (`scheduled`, `sending` or `paused` → `cancelled`): its messages not yet claimed for ' +
          'SMTP become `cancelled`; a message already being sent finishes. A completed or cancelled send, or a campaign that is not ' +
          'a broadcast, is 409.',
        params: CampaignParams,
        response: withErrors(
          { 200: Type.Object({ ok: Type.Literal(true), cancelled: Type.Integer({ description: 'Messages cancelled.' }), campaign: Campaign }) },
          [404, 409],
        ),
      },
    },
    async (request) => {
      const teamId = request.auth!.teamId;
      const id = request.params.id;
      if (!UUID_RE.test(id)) throw notFound('campaign');
      const existing = await getCampaign(db, teamId, id.toLowerCase());
      if (!existing) throw notFound('campaign');
      const result = await cancelBroadcast(db, teamId, id.toLowerCase());
      if ('status' in result) {
        throw new AppError('CONFLICT', result.status === null ? 'only a broadcast can be cancelled' : `campaign send is ${result.status}; it cannot be cancelled`);
      }
      const campaign = await getCampaign(db, teamId, id.toLowerCase());
      if (!campaign) throw notFound('campaign');
      return { ok: true as const, cancelled: result.cancelled, campaign };
    },
  );

  app.post(
    '/:id/submit',
    {
      schema: {
        tags: TAGS,
        summary: 'Fire the campaign for one contact',
        description:
          'Decides now, with the rules of a trigger (paused, contact status, segment, cooldown, daily cap, accounts), whether this ' +
          'campaign sends to the contact, and queues the e-mail when it does. The contact must exist. The submission is recorded ' +
          'as an event (`event_id`, see GET /email/events/{id}/decisions) that triggers nothing else; the same ' +
          '`idempotency_key` again returns the first decision. Sent regardless of `event_triggered_send.enabled` and `events`.',
        params: CampaignParams,
        body: SubmitBody,
        response: withErrors(
          { 202: Type.Object({ ok: Type.Literal(true), event_id: Type.String(), decision: Type.Union([DecisionObject, Type.Null()]) }) },
          [404, 409],
        ),
      },
    },
    async (request, reply) => {
      const teamId = request.auth!.teamId;
      const id = request.params.id;
      if (!UUID_RE.test(id)) throw notFound('campaign');
      const body = request.body;
      if (body.email === undefined && body.idempotency_key === undefined) {
        throw validationFailed([{ field: 'email', message: 'email or idempotency_key is required' }], 'invalid submission');
      }
      const eventName = body.event_name === undefined ? undefined : normalizeEvent(body.event_name);
      const { eventId, decision } = await submitToCampaign(db, teamId, id.toLowerCase(), { ...body, event_name: eventName }, app.deps.config.appSecret);
      const campaign = decision ? await getCampaign(db, teamId, id.toLowerCase()) : undefined;
      reply.code(202);
      return {
        ok: true as const,
        event_id: eventId,
        decision: decision && {
          ...decision,
          campaign_name: campaign?.name ?? null,
          send_status: decision.email_send_log_id ? 'queued' : null,
          decided_at: new Date(decision.decided_at).toISOString(),
        },
      };
    },
  );

  async function transition(teamId: string, id: string, from: SendStatus, to: SendStatus, verb: string): Promise<void> {
    // A retry is needed only when another request changed the send between our
    // snapshot and our row lock; the second read sees its result.
    for (let attempt = 0; attempt < 3; attempt++) {
      const result = await transitionLatestSend(db, teamId, id, from, to);
      if (result.kind === 'changed') return;
      if (result.kind === 'no_send') {
        const campaign: CampaignValue | undefined = await getCampaign(db, teamId, id);
        if (!campaign) throw notFound('campaign');
        throw new AppError('CONFLICT', `campaign has no send to be ${verb}`);
      }
      if (result.status === to) return;
      if (result.status !== from) throw new AppError('CONFLICT', `campaign send is ${result.status}; it cannot be ${verb}`);
    }
    throw new AppError('CONFLICT', 'campaign status changed concurrently; retry the request');
  }
};
