// Creating broadcast and automation campaigns in the dashboard: a form with a
// segment builder (rows of field, operator, value; every row must hold) whose
// matching count the page shows as it is edited (GET /campaigns/segment-count,
// bounded), a schedule in the user's zone (the browser sends its offset; UTC
// without JavaScript), the broadcast's cap or the automation's iterations and
// guard, and address verification. The body is the API's: createEventCampaign
// checks it and refuses with the API's fields and messages. Cancel ends a
// broadcast's or automation's send as POST /email/campaigns/{id}/cancel does.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sql } from 'kysely';
import { cancelBroadcast } from '../campaigns/broadcast.ts';
import { createEventCampaign } from '../campaigns/create.ts';
import { CreateCampaignBody } from '../campaigns/schemas.ts';
import { checkSegmentRules, SEGMENT_FIELDS, SEGMENT_OPERATORS, segmentFieldKind, segmentSql } from '../campaigns/segment.ts';
import { compileBodyValidator } from '../http/schemas.ts';
import { AppError, type ErrorDetail } from '../lib/errors.ts';
import { listMailAccounts } from '../mail/accounts.ts';
import { listTemplates } from '../templates/queries.ts';
import { fieldList, queryField, rawField, schemaDetails, signedIn, signedInPost, user, UUID_RE } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { render } from './views.ts';

/** Segment rows the form offers. */
export const SEGMENT_ROWS = 5;
/** The live count stops here ("1,000,000+"): a glance, bounded whatever the team's size. */
export const SEGMENT_COUNT_CAP = 1_000_000;

const validateBody = compileBodyValidator(CreateCampaignBody);
const NUMERIC = new Set(['bigint', 'integer', 'numeric', 'smallint', 'double precision', 'real']);

type Row = { field: string; operator: string; value: string };

/** The rules of the builder's rows: blank rows left out, values typed by their field. */
export function rulesOf(rows: Row[]): unknown[] {
  return rows.filter((r) => r.field !== '' && r.operator !== '').map((r) => {
    const kind = segmentFieldKind(r.field);
    if (r.operator === 'is_set' || r.operator === 'is_not_set') return { field: r.field, operator: r.operator };
    let value: unknown = r.value;
    if (kind && NUMERIC.has(kind) && /^-?\d+(\.\d+)?$/.test(r.value.trim())) value = Number(r.value.trim());
    else if (kind === 'boolean' && (r.value === 'true' || r.value === 'false')) value = r.value === 'true';
    return { field: r.field, operator: r.operator, value };
  });
}

/** A `datetime-local` value (the user's wall time) at the browser's offset (minutes east of UTC) to an ISO instant; null when empty or invalid. */
export function scheduleOf(local: string, offsetMinutes: string): string | null {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(local)) return null;
  const offset = /^-?\d{1,4}$/.test(offsetMinutes) ? Number(offsetMinutes) : 0;
  const wall = Date.parse(`${local}:00Z`);
  // Date.parse takes 31 February (as 3 March): only a date that reads back as typed is one.
  if (Number.isNaN(wall) || new Date(wall).toISOString().slice(0, 16) !== local) return null;
  return new Date(wall - offset * 60_000).toISOString();
}

type Form = {
  kind: 'broadcast' | 'automation'; name: string; template_ids: string[]; mail_account_ids: string[]; rows: Row[];
  schedule: string; tz_offset: string; send_amount: string; iteration_send_amount: string; send_interval: string;
  is_incremental_send: boolean; max_iteration_send_amount: string; max_iterations: string; min_delivery_rate: string;
  verify: boolean; acceptable: string[]; max_budget: string;
};

const emptyForm = (kind: Form['kind']): Form => ({
  kind, name: '', template_ids: [], mail_account_ids: [], rows: Array.from({ length: SEGMENT_ROWS }, () => ({ field: '', operator: '', value: '' })),
  schedule: '', tz_offset: '0', send_amount: '0', iteration_send_amount: '100', send_interval: '86400', is_incremental_send: false,
  max_iteration_send_amount: '0', max_iterations: '0', min_delivery_rate: '0', verify: false, acceptable: ['valid'], max_budget: '0',
});

const int = (s: string) => (/^\d{1,12}$/.test(s.trim()) ? Number(s.trim()) : s.trim() === '' ? undefined : Number.NaN);

function readForm(body: unknown): { form: Form; input: Record<string, unknown>; problems: ErrorDetail[] } {
  const text = (name: string) => rawField(body, name) ?? '';
  const rows = Array.from({ length: SEGMENT_ROWS }, (_, i) => ({ field: text(`rule_field_${i}`), operator: text(`rule_operator_${i}`), value: text(`rule_value_${i}`) }));
  const form: Form = {
    kind: text('kind') === 'automation' ? 'automation' : 'broadcast',
    name: text('name'), template_ids: fieldList(body, 'template_ids', 200), mail_account_ids: fieldList(body, 'mail_account_ids', 200), rows,
    schedule: text('schedule'), tz_offset: text('tz_offset'), send_amount: text('send_amount'),
    iteration_send_amount: text('iteration_send_amount'), send_interval: text('send_interval'), is_incremental_send: text('is_incremental_send') === 'on',
    max_iteration_send_amount: text('max_iteration_send_amount'), max_iterations: text('max_iterations'), min_delivery_rate: text('min_delivery_rate'),
    verify: text('verify') === 'on', acceptable: fieldList(body, 'acceptable_statuses', 4), max_budget: text('max_budget'),
  };
  const at = scheduleOf(form.schedule, form.tz_offset);
  // A schedule that does not read is an error, never "at once": a browser without a
  // date-time picker sends what was typed, and a broadcast would go out now.
  const problems: ErrorDetail[] = form.schedule.trim() !== '' && at === null
    ? [{ field: 'schedule', message: 'is not a date and time (YYYY-MM-DDTHH:MM); leave it empty to send at once' }]
    : [];
  const input: Record<string, unknown> = {
    name: form.name, campaign_type: form.kind, template_ids: form.template_ids, mail_account_ids: form.mail_account_ids,
    segment_query: { rules: rulesOf(rows) },
    ...(form.verify ? { verification_data: { active: true, acceptable_statuses: form.acceptable, ...(int(form.max_budget) !== undefined ? { max_budget: int(form.max_budget) } : {}) } } : {}),
  };
  if (form.kind === 'broadcast') {
    input.broadcast_send = { scheduled_send_time: at, ...(int(form.send_amount) !== undefined ? { send_amount: int(form.send_amount) } : {}) };
  } else {
    const a: Record<string, unknown> = { scheduled_send_time: at, is_incremental_send: form.is_incremental_send };
    for (const k of ['iteration_send_amount', 'send_interval', 'max_iteration_send_amount', 'max_iterations', 'min_delivery_rate'] as const) {
      const v = int(form[k]);
      if (v !== undefined) a[k] = v;
    }
    if (int(form.send_amount) !== undefined) a.send_amount = int(form.send_amount);
    input.automation_send = a;
  }
  return { form, input, problems };
}

/** The number of the team's active contacts that match `rules`: exact up to the cap, "N+" past it; null when the segment does not compile to SQL. */
export async function segmentCount(db: FastifyInstance['deps']['db'], teamId: string, rules: unknown[]): Promise<string | null> {
  const where = segmentSql(rules);
  if (!where) return null;
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM (SELECT 1 FROM contacts WHERE team_id = ${teamId}::uuid AND status = 'active' AND ${where} LIMIT ${SEGMENT_COUNT_CAP + 1}) c`.execute(db);
  const n = rows[0]!.n;
  return n > SEGMENT_COUNT_CAP ? `${SEGMENT_COUNT_CAP.toLocaleString('en-US')}+` : n.toLocaleString('en-US');
}

export async function listCampaignPages(app: FastifyInstance): Promise<void> {
  const { db } = app.deps;

  async function page(request: FastifyRequest, reply: FastifyReply, form: Form, errors?: ErrorDetail[], status = 200) {
    const teamId = user(request).teamId;
    const [templates, accounts] = await Promise.all([listTemplates(db, teamId, { page: 1, perPage: 100, withContent: false }), listMailAccounts(db, teamId, { page: 1, perPage: 100 })]);
    const count = errors ? null : await segmentCount(db, teamId, rulesOf(form.rows));
    return render(request, reply, 'list-campaign-form', {
      form, errors, count, fields: SEGMENT_FIELDS, operators: SEGMENT_OPERATORS,
      templates: templates.rows, accounts: accounts.rows.filter((a) => a.status === 'active'),
    }, status);
  }

  app.get('/campaigns/new-list', signedIn, async (request, reply) =>
    page(request, reply, emptyForm(queryField(request.query, 'kind', 12) === 'automation' ? 'automation' : 'broadcast')));

  app.post('/campaigns/new-list', signedInPost, async (request, reply) => {
    const { form, input, problems } = readForm(request.body);
    const invalid = [...problems, ...schemaDetails(validateBody, input)];
    if (invalid.length > 0) return page(request, reply, form, invalid, 422);
    try {
      const c = await createEventCampaign(db, user(request).teamId, input as never);
      return reply.redirect(`/campaigns/${c.id}?done=created_list`, 303);
    } catch (err) {
      if (err instanceof AppError && err.details) return page(request, reply, form, err.details, 422);
      throw err;
    }
  });

  // The live count of the builder (dashboard.js): ?rules=<JSON array>, at most 8 KiB.
  app.get('/campaigns/segment-count', signedIn, async (request, reply) => {
    const raw = queryField(request.query, 'rules', 8192);
    let rules: unknown;
    try {
      rules = JSON.parse(raw || '[]');
    } catch {
      return reply.code(422).send({ ok: false, error: { code: 'VALIDATION_FAILED', message: 'rules is not JSON' } });
    }
    if (!Array.isArray(rules) || rules.length > 20) return reply.code(422).send({ ok: false, error: { code: 'VALIDATION_FAILED', message: 'rules must be an array of at most 20 rules' } });
    const problems = checkSegmentRules(rules);
    if (problems.length > 0) return reply.code(422).send({ ok: false, error: { code: 'VALIDATION_FAILED', message: 'invalid rules', details: problems } });
    return { ok: true, count: await segmentCount(db, user(request).teamId, rules) };
  });

  app.post<{ Params: { id: string } }>('/campaigns/:id/cancel', signedInPost, async (request, reply) => {
    const id = request.params.id;
    if (!UUID_RE.test(id)) throw pageNotFound();
    const teamId = user(request).teamId;
    const exists = await sql`SELECT 1 FROM campaigns WHERE id = ${id.toLowerCase()}::uuid AND team_id = ${teamId}::uuid AND deleted_at IS NULL`.execute(db);
    if (exists.rows.length === 0) throw pageNotFound();
    // An event-triggered campaign, or a send already ended: nothing to cancel (the API's 409).
    const r = await cancelBroadcast(db, teamId, id.toLowerCase());
    return reply.redirect(`/campaigns/${id.toLowerCase()}?done=${'cancelled' in r ? 'cancelled' : 'not_cancelled'}`, 303);
  });
}
