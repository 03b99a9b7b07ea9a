// Webhooks: list, create, edit, enable/disable, delete, secret on demand, and
// the delivery log with resend. Every change goes through the same functions as
// the API (src/webhooks/queries.ts, deliveries.ts, guard.ts), so the same rules
// hold: the limit of 10 enabled, the event catalog, target safety. A locked
// webhook (`source` set) belongs to an integration: the dashboard offers no edit
// or delete for it and refuses forged ones (docs/api.md, "Webhooks").
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../lib/errors.ts';
import { WEBHOOK_EVENTS } from '../webhooks/catalog.ts';
import { resendDelivery } from '../webhooks/deliveries.ts';
import { parseAllowList } from '../lib/net-guard.ts';
import { checkTargetUrl } from '../webhooks/guard.ts';
import {
  createWebhook,
  deleteWebhook,
  findWebhook,
  listWebhooks,
  MAX_ENABLED_WEBHOOKS,
  openSecret,
  updateWebhook,
  webhookSecretBox,
  type WebhookRow,
} from '../webhooks/queries.ts';
import { field, queryField, signedIn, signedInPost, user, UUID_RE } from './forms.ts';
import { PageError, pageNotFound } from './page-error.ts';
import { deliveryPage, DELIVERIES_PER_PAGE } from './queries.ts';
import { PERIODS, periodOf, wantsCsv } from './stats-view.ts';
import { webhookCsv, webhookStats } from './webhook-stats.ts';
import { render } from './views.ts';

type IdParams = { Params: { id: string } };
type Form = { url: string; events: string[]; description: string; is_enabled: boolean };

const MESSAGES: Record<string, string> = {
  created: 'Webhook created.',
  saved: 'Webhook saved.',
  enabled: 'Webhook enabled: it has a new secret.',
  disabled: 'Webhook disabled: its deliveries, and the events that occur meanwhile, wait until it is enabled again.',
  resent: 'Delivery queued to be sent again now.',
  deleted: 'Webhook deleted.',
};

/** The checked events of a form (one checkbox gives a string, several an array). */
function formEvents(body: unknown): string[] {
  const raw = (body as Record<string, unknown> | undefined)?.events;
  const list = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
  return list.filter((e): e is string => typeof e === 'string');
}

const lockedError = (row: WebhookRow) =>
  new PageError(403, `This webhook is locked: it is managed by ${row.source}. Change it there (or unlock it through the API).`);

export async function webhookPages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;
  const allow = parseAllowList(config.allowedPrivateTargets);
  const box = () => webhookSecretBox(config.appSecret);

  async function findOwn(request: FastifyRequest<IdParams>): Promise<WebhookRow> {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const row = await findWebhook(db, user(request).teamId, request.params.id.toLowerCase());
    if (!row) throw pageNotFound();
    return row;
  }

  /** The form's values, or the problems with them (same rules as the API schemas and guard). */
  async function readForm(body: unknown): Promise<{ form: Form; errors: string[] }> {
    const form: Form = {
      url: field(body, 'url', 2048).trim(),
      events: formEvents(body),
      description: field(body, 'description', 1000).trim(),
      is_enabled: field(body, 'is_enabled', 10) === 'on',
    };
    const errors: string[] = [];
    const problem = form.url ? await checkTargetUrl(form.url, allow, app.deps.resolveHost) : 'is required';
    if (problem) errors.push(`URL ${problem}.`);
    if (form.events.length === 0) errors.push('Choose at least one event.');
    if (form.events.some((e) => !(WEBHOOK_EVENTS as readonly string[]).includes(e))) errors.push('Choose events from the list.');
    return { form, errors };
  }

  const formPage = (request: FastifyRequest, reply: FastifyReply, data: Record<string, unknown>, status = 200) =>
    render(request, reply, 'webhook-form', { catalog: WEBHOOK_EVENTS, ...data }, status);

  app.get('/webhooks', signedIn, async (request, reply) => {
    const { rows, total } = await listWebhooks(db, user(request).teamId, { page: 1, perPage: 100 });
    const enabled = rows.filter((r) => r.is_enabled).length;
    const message = MESSAGES[queryField(request.query, 'done', 20)];
    // The banner: webhooks the service disabled for failing (auto-disable.ts), until the team enables them again.
    const autoDisabled = rows
      .filter((r) => !r.is_enabled && r.auto_disabled_at)
      .map((r) => ({ id: r.id, url: r.url, reason: r.disabled_reason, at: r.auto_disabled_at }));
    return render(request, reply, 'webhooks', { webhooks: rows, total, enabled, max: MAX_ENABLED_WEBHOOKS, message, autoDisabled });
  });

  app.get('/webhooks/new', signedIn, async (request, reply) =>
    formPage(request, reply, { form: { url: '', events: [], description: '', is_enabled: true }, action: '/webhooks' }),
  );

  app.post('/webhooks', signedInPost, async (request, reply) => {
    const { form, errors } = await readForm(request.body);
    if (errors.length) return formPage(request, reply, { form, errors, action: '/webhooks' }, 422);
    try {
      const row = await createWebhook(db, box(), user(request).teamId, {
        url: form.url,
        events: form.events,
        description: form.description || null,
        is_enabled: form.is_enabled,
      });
      return reply.redirect(`/webhooks/${row.id}?done=created`, 303);
    } catch (err) {
      if (err instanceof AppError && err.code === 'MAX_WEBHOOKS_EXCEEDED') {
        return formPage(request, reply, { form, errors: [`${err.message}. You can create it disabled.`], action: '/webhooks' }, 422);
      }
      throw err;
    }
  });

  app.get<IdParams>('/webhooks/:id', signedIn, async (request, reply) => {
    const webhook = await findOwn(request);
    return showWebhook(request, reply, webhook, {});
  });

  async function showWebhook(request: FastifyRequest, reply: FastifyReply, webhook: WebhookRow, extra: Record<string, unknown>, status = 200) {
    const status_ = queryField(request.query, 'status', 10);
    const filter = ['pending', 'success', 'failed'].includes(status_) ? (status_ as 'pending' | 'success' | 'failed') : undefined;
    const before = queryField(request.query, 'before', 36);
    const period = periodOf(request);
    if (wantsCsv(request)) {
      // The chart's series only: the page of deliveries is not read for a download.
      const chart = await webhookStats(db, user(request).teamId, webhook.id, period);
      return reply.code(200).type('text/csv; charset=utf-8')
        .header('content-disposition', `attachment; filename="webhook-${webhook.id}-${period}.csv"`).send(webhookCsv(chart.series));
    }
    const [rows, chart] = await Promise.all([
      deliveryPage(db, user(request).teamId, webhook.id, filter, UUID_RE.test(before) ? before : undefined),
      webhookStats(db, user(request).teamId, webhook.id, period),
    ]);
    const more = rows.length > DELIVERIES_PER_PAGE;
    const deliveries = rows.slice(0, DELIVERIES_PER_PAGE).map((d) => ({
      ...d,
      payload_json: JSON.stringify(d.payload, null, 2),
    }));
    return render(
      request,
      reply,
      'webhook',
      {
        webhook,
        deliveries,
        chart: { ...chart, periods: Object.entries(PERIODS).map(([key, p]) => ({ key, label: p.label, current: key === period })) },
        filter: filter ?? '',
        statuses: ['pending', 'success', 'failed'],
        next: more ? deliveries[deliveries.length - 1].id : null,
        paged: !!before,
        message: MESSAGES[queryField(request.query, 'done', 20)],
        ...extra,
      },
      status,
    );
  }

  // Shown only in the answer to a POST (CSRF-checked, never cached), not in any
  // page a link or a prefetch could load.
  app.post<IdParams>('/webhooks/:id/secret', signedInPost, async (request, reply) => {
    const webhook = await findOwn(request);
    return showWebhook(request, reply, webhook, { secret: openSecret(box(), webhook) });
  });

  app.get<IdParams>('/webhooks/:id/edit', signedIn, async (request, reply) => {
    const webhook = await findOwn(request);
    if (webhook.source !== null) throw lockedError(webhook);
    return formPage(request, reply, {
      webhook,
      form: { url: webhook.url, events: webhook.events, description: webhook.description ?? '', is_enabled: webhook.is_enabled },
      action: `/webhooks/${webhook.id}/edit`,
    });
  });

  app.post<IdParams>('/webhooks/:id/edit', signedInPost, async (request, reply) => {
    const webhook = await findOwn(request);
    if (webhook.source !== null) throw lockedError(webhook);
    const { form, errors } = await readForm(request.body);
    const action = `/webhooks/${webhook.id}/edit`;
    if (errors.length) return formPage(request, reply, { webhook, form, errors, action }, 422);
    // Enablement has its own buttons (limit check, new secret); the edit form leaves it.
    await updateWebhook(db, box(), user(request).teamId, webhook.id, { url: form.url, events: form.events, description: form.description || null });
    return reply.redirect(`/webhooks/${webhook.id}?done=saved`, 303);
  });

  for (const [action, isEnabled] of [['enable', true], ['disable', false]] as const) {
    app.post<IdParams>(`/webhooks/:id/${action}`, signedInPost, async (request, reply) => {
      const webhook = await findOwn(request);
      try {
        await updateWebhook(db, box(), user(request).teamId, webhook.id, { is_enabled: isEnabled });
      } catch (err) {
        if (err instanceof AppError && err.code === 'MAX_WEBHOOKS_EXCEEDED') {
          return showWebhook(request, reply, webhook, { error: `${err.message}.` }, 422);
        }
        throw err;
      }
      return reply.redirect(`/webhooks/${webhook.id}?done=${action}d`, 303);
    });
  }

  app.get<IdParams>('/webhooks/:id/delete', signedIn, async (request, reply) => {
    const webhook = await findOwn(request);
    if (webhook.source !== null) throw lockedError(webhook);
    return render(request, reply, 'webhook-delete', { webhook });
  });

  app.post<IdParams>('/webhooks/:id/delete', signedInPost, async (request, reply) => {
    const webhook = await findOwn(request);
    if (webhook.source !== null) throw lockedError(webhook);
    await deleteWebhook(db, user(request).teamId, webhook.id);
    return reply.redirect('/webhooks?done=deleted', 303);
  });

  app.post<{ Params: { id: string; delivery: string } }>('/webhooks/:id/deliveries/:delivery/resend', signedInPost, async (request, reply) => {
    const webhook = await findOwn(request);
    if (!UUID_RE.test(request.params.delivery)) throw pageNotFound();
    const row = await resendDelivery(db, user(request).teamId, webhook.id, request.params.delivery.toLowerCase());
    if (!row) throw pageNotFound();
    return reply.redirect(`/webhooks/${webhook.id}?done=resent`, 303);
  });
}
