// Campaigns: the list with start/stop (pause/resume of the latest send), create
// and edit forms, and a campaign's page with its settings, counts, sends (the
// messages it queued) and decisions (why each event did or did not send).
// Create goes through createEventCampaign (campaigns/create.ts), the function
// POST /email/campaigns calls, after the API's own schema check of the body the
// form makes; edit through updateCampaign (campaigns/manage.ts), the function
// of PATCH /email/campaigns/{id}: the same rules and the same messages.
import { pauseOrResume } from '../campaigns/broadcast.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { createEventCampaign } from '../campaigns/create.ts';
import { deleteCampaign, updateCampaign } from '../campaigns/manage.ts';
import { getCampaign, transitionLatestSend } from '../campaigns/queries.ts';
import { CreateCampaignBody, TRIGGER_EVENTS, type CampaignValue, type CreateCampaignInput, type SendDataValue } from '../campaigns/schemas.ts';
import { DEFAULT_COOLDOWN_SECONDS, DEFAULT_DAILY_CAP } from '../campaigns/send-data.ts';
import { compileBodyValidator } from '../http/schemas.ts';
import { AppError, type ErrorDetail } from '../lib/errors.ts';
import { listMailAccounts } from '../mail/accounts.ts';
import { publicStatus } from '../mail/emails-queries.ts';
import { listTemplates } from '../templates/queries.ts';
import { fieldList, numberField, queryField, rawField, schemaDetails, signedIn, signedInPost, user, UUID_RE, validationDetails } from './forms.ts';
import { reasonInWords } from './decision-reasons.ts';
import { csvReply, periodOf, periodStats, statsPanel, wantsCsv } from './stats-view.ts';
import { pageNotFound } from './page-error.ts';
import {
  CAMPAIGN_ROWS_PER_PAGE,
  campaignCounts,
  campaignDecisionPage,
  campaignMessagePage,
  campaignPage,
  campaignParts,
  CAMPAIGNS_PER_PAGE,
} from './queries.ts';
import { render } from './views.ts';

type IdParams = { Params: { id: string } };

const MESSAGES: Record<string, string> = {
  started: 'Campaign started.',
  stopped: 'Campaign stopped.',
  unchanged: 'Nothing to change: the campaign was already in that state.',
  conflict: 'The campaign’s latest send is completed or failed; it cannot be started or stopped.',
  no_send: 'The campaign has no send to start or stop.',
  created: 'Campaign created: it sends on its events from now on.',
  saved: 'Campaign saved: the next events are decided with these settings.',
  deleted: 'Campaign deleted: it sends nothing more; its messages not yet sent were cancelled.',
  created_list: 'Campaign created: it starts at its scheduled time (or now), its recipient list written as it goes.',
  cancelled: 'Send cancelled: its messages not yet sent were cancelled.',
  not_cancelled: 'Nothing to cancel: only a scheduled, sending or paused broadcast or automation send can be cancelled.',
};

const validateBody = compileBodyValidator(CreateCampaignBody);

/** What the form shows: the values as typed. */
type Form = {
  name: string;
  template_ids: string[];
  mail_account_ids: string[];
  events: string[];
  from_name: string;
  reply_to_name: string;
  reply_to_email: string;
  open_tracking: boolean;
  click_tracking: boolean;
  enabled: boolean;
  contact_cooldown_interval: string;
  contact_daily_email_cap: string;
};

const emptyForm = (): Form => ({
  name: '',
  template_ids: [],
  mail_account_ids: [],
  events: ['contact.saved'],
  from_name: '',
  reply_to_name: '',
  reply_to_email: '',
  open_tracking: true,
  click_tracking: true,
  enabled: true,
  contact_cooldown_interval: String(DEFAULT_COOLDOWN_SECONDS),
  contact_daily_email_cap: String(DEFAULT_DAILY_CAP),
});

/**
 * The settings of a campaign's latest send (else its draft), read defensively:
 * a row written by an older version or by hand must not make its page fail.
 */
function settingsOf(c: CampaignValue) {
  const d = (c.campaign_sends[0]?.send_data ?? c.draft_data?.send_data ?? {}) as Partial<SendDataValue>;
  const ets: Partial<SendDataValue['event_triggered_send']> = d.event_triggered_send ?? {};
  const ids = (v: unknown) => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string' && UUID_RE.test(x)) : []);
  return {
    template_ids: ids(d.template_ids),
    mail_account_ids: ids(d.mail_account_ids),
    events: Array.isArray(ets.events) ? ets.events.filter((e) => typeof e === 'string') : [],
    from_name: d.from_name ?? '',
    reply_to_name: d.reply_to_name ?? '',
    reply_to_email: d.reply_to_email ?? '',
    open_tracking: d.open_tracking ?? true,
    click_tracking: d.click_tracking ?? true,
    enabled: ets.enabled ?? true,
    contact_cooldown_interval: ets.contact_cooldown_interval ?? DEFAULT_COOLDOWN_SECONDS,
    contact_daily_email_cap: ets.contact_daily_email_cap ?? DEFAULT_DAILY_CAP,
  };
}

function formOf(c: CampaignValue): Form {
  const s = settingsOf(c);
  return {
    ...s,
    name: c.name,
    contact_cooldown_interval: String(s.contact_cooldown_interval),
    contact_daily_email_cap: String(s.contact_daily_email_cap),
  };
}

/** The form as typed, and the JSON body the API would get from it. */
function readForm(body: unknown): { form: Form; input: Record<string, unknown> } {
  const text = (name: string) => rawField(body, name) ?? '';
  const on = (name: string) => text(name) === 'on';
  const form: Form = {
    name: text('name'),
    template_ids: fieldList(body, 'template_ids', 200),
    mail_account_ids: fieldList(body, 'mail_account_ids', 200),
    events: fieldList(body, 'events', 20),
    from_name: text('from_name'),
    reply_to_name: text('reply_to_name'),
    reply_to_email: text('reply_to_email'),
    open_tracking: on('open_tracking'),
    click_tracking: on('click_tracking'),
    enabled: on('enabled'),
    contact_cooldown_interval: text('contact_cooldown_interval'),
    contact_daily_email_cap: text('contact_daily_email_cap'),
  };
  const ets: Record<string, unknown> = { enabled: form.enabled };
  const cooldown = numberField(body, 'contact_cooldown_interval');
  const cap = numberField(body, 'contact_daily_email_cap');
  if (cooldown !== undefined) ets.contact_cooldown_interval = cooldown;
  if (cap !== undefined) ets.contact_daily_email_cap = cap;
  const input: Record<string, unknown> = {
    name: form.name,
    template_ids: form.template_ids,
    mail_account_ids: form.mail_account_ids,
    events: form.events,
    // Empty optional fields are absent, as a client would leave them out.
    ...(form.from_name !== '' ? { from_name: form.from_name } : {}),
    ...(form.reply_to_name !== '' ? { reply_to_name: form.reply_to_name } : {}),
    ...(form.reply_to_email.trim() !== '' ? { reply_to_email: form.reply_to_email.trim() } : {}),
    open_tracking: form.open_tracking,
    click_tracking: form.click_tracking,
    event_triggered_send: ets,
  };
  return { form, input };
}

export async function campaignPages(app: FastifyInstance): Promise<void> {
  const { db } = app.deps;

  async function findOwn(request: FastifyRequest<IdParams>): Promise<CampaignValue> {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const campaign = await getCampaign(db, user(request).teamId, request.params.id.toLowerCase());
    if (!campaign) throw pageNotFound();
    return campaign;
  }

  async function formPage(
    request: FastifyRequest,
    reply: FastifyReply,
    data: { campaign?: CampaignValue; form: Form; errors?: ErrorDetail[] },
    status = 200,
  ) {
    const teamId = user(request).teamId;
    const [templates, accounts] = await Promise.all([
      listTemplates(db, teamId, { page: 1, perPage: 100, withContent: false }),
      listMailAccounts(db, teamId, { page: 1, perPage: 100 }),
    ]);
    // A campaign being edited may name an account disabled since: shown, so it can be unticked.
    const chosen = new Set(data.form.mail_account_ids);
    return render(
      request,
      reply,
      'campaign-form',
      {
        ...data,
        action: data.campaign ? `/campaigns/${data.campaign.id}/edit` : '/campaigns',
        templates: templates.rows,
        accounts: accounts.rows.filter((a) => a.status === 'active' || chosen.has(a.id)),
        catalog: TRIGGER_EVENTS,
      },
      status,
    );
  }

  app.get('/campaigns', signedIn, async (request, reply) => {
    const before = queryField(request.query, 'before', 36);
    const rows = await campaignPage(db, user(request).teamId, UUID_RE.test(before) ? before : undefined);
    const more = rows.length > CAMPAIGNS_PER_PAGE;
    const campaigns = rows.slice(0, CAMPAIGNS_PER_PAGE);
    const message = MESSAGES[queryField(request.query, 'done', 20)];
    return render(request, reply, 'campaigns', {
      campaigns,
      message,
      next: more ? campaigns[campaigns.length - 1].id : null,
      paged: !!before,
    });
  });

  app.get('/campaigns/new', signedIn, async (request, reply) => formPage(request, reply, { form: emptyForm() }));

  app.post('/campaigns', signedInPost, async (request, reply) => {
    const { form, input } = readForm(request.body);
    let errors = schemaDetails(validateBody, input);
    if (!errors.length) {
      try {
        const campaign = await createEventCampaign(db, user(request).teamId, input as CreateCampaignInput);
        return reply.redirect(`/campaigns/${campaign.id}?done=created`, 303);
      } catch (err) {
        errors = validationDetails(err) ?? [];
        if (!errors.length) throw err;
      }
    }
    return formPage(request, reply, { form, errors }, 422);
  });

  app.get<IdParams>('/campaigns/:id', signedIn, async (request, reply) => {
    const campaign = await findOwn(request);
    const teamId = user(request).teamId;
    const sendsBefore = queryField(request.query, 'sends_before', 36);
    const decisionsBefore = queryField(request.query, 'decisions_before', 36);
    const latest = campaign.campaign_sends[0];
    const settings = settingsOf(campaign);
    const period = periodOf(request);
    if (wantsCsv(request)) {
      return csvReply(reply, await periodStats(db, teamId, { kind: 'campaign', id: campaign.id }, period), `campaign-${campaign.id}-${period}`);
    }
    const [stats, counts, parts, messageRows, decisionRows] = await Promise.all([
      periodStats(db, teamId, { kind: 'campaign', id: campaign.id }, period),
      campaignCounts(db, teamId, campaign.id),
      campaignParts(db, teamId, settings.template_ids, settings.mail_account_ids),
      campaignMessagePage(db, teamId, campaign.id, UUID_RE.test(sendsBefore) ? sendsBefore : undefined),
      campaignDecisionPage(db, teamId, campaign.id, UUID_RE.test(decisionsBefore) ? decisionsBefore : undefined),
    ]);
    const messages = messageRows.slice(0, CAMPAIGN_ROWS_PER_PAGE).map((m) => ({ ...m, status: publicStatus(m.status) }));
    const decisions = decisionRows.slice(0, CAMPAIGN_ROWS_PER_PAGE).map((d) => ({
      ...d,
      why: reasonInWords(d.reason),
      send_status: d.send_status ? publicStatus(d.send_status) : null,
    }));
    return render(request, reply, 'campaign', {
      campaign,
      status: latest?.status ?? null,
      pauseReason: (latest?.send_progress as { pause_reason?: string | null } | undefined)?.pause_reason ?? null,
      progress: latest?.campaign_type === 'automation' || latest?.campaign_type === 'broadcast' ? latest.send_progress : null,
      // A broadcast's or automation's start (or next iteration), shown in the reader's zone by dashboard.js.
      nextSendAt: (latest?.campaign_type === 'automation' || latest?.campaign_type === 'broadcast') && latest.next_send_at && ['scheduled', 'sending'].includes(latest.status)
        ? latest.next_send_at : null,
      settings,
      counts,
      panel: statsPanel(stats, period, `/campaigns/${campaign.id}`),
      templates: settings.template_ids.map((id) => parts.templates.find((t) => t.id === id) ?? { id, name: null, status: 'deleted' }),
      accounts: settings.mail_account_ids.map((id) => parts.accounts.find((a) => a.id === id) ?? { id, from_email: null, status: 'deleted' }),
      messages,
      decisions,
      sendsNext: messageRows.length > CAMPAIGN_ROWS_PER_PAGE ? messages[messages.length - 1].id : null,
      decisionsNext: decisionRows.length > CAMPAIGN_ROWS_PER_PAGE ? decisions[decisions.length - 1].id : null,
      paged: !!(sendsBefore || decisionsBefore),
      message: MESSAGES[queryField(request.query, 'done', 20)],
    });
  });

  app.get<IdParams>('/campaigns/:id/edit', signedIn, async (request, reply) => {
    const campaign = await findOwn(request);
    return formPage(request, reply, { campaign, form: formOf(campaign) });
  });

  app.post<IdParams>('/campaigns/:id/edit', signedInPost, async (request, reply) => {
    const campaign = await findOwn(request);
    const { form, input } = readForm(request.body);
    // The PATCH the API would get: every field of the form, an emptied one
    // cleared (segment rules, which the form does not show, stay).
    const patch = { ...input, from_name: form.from_name, reply_to_name: form.reply_to_name, reply_to_email: form.reply_to_email.trim() };
    try {
      await updateCampaign(db, user(request).teamId, campaign.id, patch);
    } catch (err) {
      const errors = validationDetails(err);
      if (!errors) throw err;
      return formPage(request, reply, { campaign, form, errors }, 422);
    }
    return reply.redirect(`/campaigns/${campaign.id}?done=saved`, 303);
  });

  // Delete, with a confirm step: deleteCampaign, as DELETE /email/campaigns/{id}; a refusal (409) is shown on the page.
  const deletePage = (request: FastifyRequest, reply: FastifyReply, campaign: CampaignValue, problem?: string, status = 200) =>
    render(request, reply, 'confirm', {
      title: `Delete the campaign “${campaign.name}”?`,
      lead: 'It sends nothing more from then on. This cannot be undone.',
      items: [
        'its messages not yet sent (queued, or waiting for a retry) are cancelled; one being sent finishes',
        'the message log keeps the messages it sent, for the counts',
      ],
      action: `/campaigns/${campaign.id}/delete`,
      button: 'Delete campaign',
      back: `/campaigns/${campaign.id}`,
      back_label: campaign.name,
      problem,
    }, status);

  app.get<IdParams>('/campaigns/:id/delete', signedIn, async (request, reply) => deletePage(request, reply, await findOwn(request)));

  app.post<IdParams>('/campaigns/:id/delete', signedInPost, async (request, reply) => {
    const campaign = await findOwn(request);
    try {
      await deleteCampaign(db, user(request).teamId, campaign.id);
    } catch (err) {
      if (err instanceof AppError && err.code === 'NOT_FOUND') throw pageNotFound();
      if (err instanceof AppError && err.code === 'CONFLICT') return deletePage(request, reply, campaign, err.message, 409);
      throw err;
    }
    return reply.redirect('/campaigns?done=deleted', 303);
  });

  for (const action of ['start', 'stop'] as const) {
    const [from, to] = action === 'start' ? (['paused', 'active'] as const) : (['active', 'paused'] as const);
    app.post<IdParams>(`/campaigns/:id/${action}`, signedInPost, async (request, reply) => {
      const id = request.params.id;
      if (!UUID_RE.test(id)) throw pageNotFound();
      // A broadcast pauses and resumes as through the API (campaigns/broadcast.ts).
      const b = await pauseOrResume(db, user(request).teamId, id.toLowerCase(), action);
      const result = b.kind === 'not_broadcast' ? await transitionLatestSend(db, user(request).teamId, id, from, to)
        : b.kind === 'conflict' ? { kind: 'unchanged' as const, status: 'conflict' } : b.kind === 'changed' ? { kind: 'changed' as const } : { kind: 'unchanged' as const, status: to };
      let done: string;
      if (result.kind === 'changed') done = action === 'start' ? 'started' : 'stopped';
      else if (result.kind === 'unchanged') done = result.status === to ? 'unchanged' : 'conflict';
      else {
        // No send: the campaign may not exist for this team at all.
        const exists = await db.selectFrom('campaigns').select('id').where('team_id', '=', user(request).teamId).where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst();
        if (!exists) throw pageNotFound();
        done = 'no_send';
      }
      // From the campaign's own page, back to it; from the list, back to the list.
      const back = rawField(request.body, 'back') === 'campaign' ? `/campaigns/${id.toLowerCase()}` : '/campaigns';
      return reply.redirect(`${back}?done=${done}`, 303);
    });
  }
}
