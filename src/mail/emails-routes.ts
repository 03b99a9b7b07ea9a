// The message log API (/email/emails): transactional submit and batch, and
// reads of the one log every message of a team is in (campaign mail too).
// A transactional e-mail is an email_send_log row with source
// `transactional` and a send_email job: after rendering it takes the campaign
// path (SMTP pool, result recording, bounces, tracking, webhooks).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { AppError, detailsFromAjv, notFound, validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { pageMeta, rejectInvalidId, validatorCompiler, withErrors } from '../http/schemas.ts';
import {
  BATCH_MAX, BatchBody, BatchResponse, EmailDetailResponse, EmailListResponse, EmailResponse, IdempotencyHeaders, IdParams,
  ListQuery, SubmitBody, type SubmitInput,
} from './emails-schemas.ts';
import {
  insertEmails, listEmails, loadRefs, lockIdempotencyKeys, publicStatus, requestHash, storeIdempotentAnswers,
  type LogRow, type NewEmail, type Refs,
} from './emails-queries.ts';
import { emailWithTimeline } from './emails-timeline.ts';
import { suppressedForAllMail } from '../contacts/suppressions.ts';
import { normalizeEmail } from '../lib/text.ts';

const tags = ['emails'];
const given = <T>(v: T | null | undefined): T | null => (v === undefined || v === null ? null : v);

/** The body as it is hashed for its idempotency key: the key itself is not part of it. */
function hashable(item: SubmitInput): Record<string, unknown> {
  const { idempotency_key: _key, ...rest } = item;
  return { ...rest, to_email: normalizeEmail(rest.to_email) };
}

/** Problems of one item against the team's rows (the schema has checked its shape). */
function check(item: SubmitInput, refs: Refs, prefix: string): ErrorDetail[] {
  const out: ErrorDetail[] = [];
  const template = refs.templates.get(item.template_id);
  if (!template) out.push({ field: `${prefix}template_id`, message: 'no template of this team has this id' });
  else if (template.status !== 'active') out.push({ field: `${prefix}template_id`, message: `the template is ${template.status}` });
  const account = refs.accounts.get(item.mail_account_id);
  if (!account) out.push({ field: `${prefix}mail_account_id`, message: 'no mail account of this team has this id' });
  else if (account.status !== 'active') out.push({ field: `${prefix}mail_account_id`, message: `the mail account is ${account.status}` });
  if (item.contact_id && !refs.contactsById.has(item.contact_id)) {
    out.push({ field: `${prefix}contact_id`, message: 'no contact of this team has this id' });
  }
  return out;
}

function toNewEmail(item: SubmitInput, refs: Refs, suppressed: boolean): NewEmail {
  const email = normalizeEmail(item.to_email);
  const subject = item.subject ? item.subject : null;
  return {
    template_id: item.template_id,
    mail_account_id: item.mail_account_id,
    // The linked contact: the one named, else the team's contact with this address (none is created).
    contact_id: given(item.contact_id) ?? refs.contactsByEmail.get(email) ?? null,
    email,
    to_name: given(item.to_name),
    // Until it is rendered at send time: the override, else the template's subject as written.
    subject: subject ?? refs.templates.get(item.template_id)?.subject ?? null,
    status: suppressed ? 'suppressed' : 'queued',
    open_tracking: item.track_opens === true,
    click_tracking: item.track_clicks === true,
    render: {
      variables: given(item.variables) ?? {},
      subject,
      from_name: item.from_name ? item.from_name : null,
      reply_to: item.reply_to ? normalizeEmail(item.reply_to) : null,
    },
  };
}

function submitted(row: NewEmail, id: string, createdAt: Date) {
  const at = createdAt.toISOString();
  return {
    id, source: 'transactional' as const, status: row.status, to_email: row.email, to_name: row.to_name,
    template_id: row.template_id, mail_account_id: row.mail_account_id, contact_id: row.contact_id,
    campaign_id: null, campaign_send_id: null, subject: row.subject, message_id: null, attempts: 0,
    created_at: at, updated_at: at, sent_at: null,
  };
}

export function toEmail(r: LogRow) {
  return {
    id: r.id, source: r.source, status: publicStatus(r.status), to_email: r.email, to_name: r.to_name,
    template_id: r.template_id, mail_account_id: r.mail_account_id, contact_id: r.contact_id, campaign_id: r.campaign_id,
    campaign_send_id: r.campaign_send_id, subject: r.subject, message_id: r.message_id, attempts: r.attempts,
    created_at: r.created_at.toISOString(), updated_at: r.updated_at.toISOString(), sent_at: r.sent_at?.toISOString() ?? null,
  };
}

const validItem = validatorCompiler({ schema: SubmitBody, httpPart: 'body', method: 'POST', url: '/email/emails/batch' }) as (v: unknown) => boolean;

/**
 * A batch whose shape is wrong somewhere: the schema's problems, plus those of
 * the well-formed items against the team's rows, so one answer names every bad
 * index (not only the first kind of problem).
 */
async function rejectBatch(request: FastifyRequest, load: (items: SubmitInput[]) => Promise<Refs>): Promise<never> {
  const err = request.validationError as Error & { validation?: any[]; validationContext?: string };
  const body = request.body as { emails?: unknown } | null;
  if (err.validationContext !== 'body' || !Array.isArray(body?.emails) || body.emails.length > BATCH_MAX) throw err;
  const details = detailsFromAjv(err.validation ?? [], 'body');
  const wellFormed = body.emails.map((item, i) => ({ item: item as SubmitInput, i })).filter(({ item }) => validItem(item));
  const refs = await load(wellFormed.map((w) => w.item));
  for (const { item, i } of wellFormed) details.push(...check(item, refs, `emails[${i}].`));
  const index = (f: string) => Number(/^emails\[(\d+)\]/.exec(f)?.[1] ?? -1);
  throw validationFailed(details.sort((a, b) => index(a.field) - index(b.field)));
}

function conflict(fields: string[]): AppError {
  return new AppError(
    'CONFLICT', 'this idempotency key was used in the last 24 hours with a different request',
    fields.map((field) => ({ field, message: 'was used with a different request body' })),
  );
}

export const emailsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { db, config } = app.deps;
  const secret = () => {
    if (!config.appSecret) throw new Error('APP_SECRET is not configured');
    return config.appSecret;
  };

  app.post('/submit', {
    schema: {
      tags, summary: 'Send one transactional e-mail',
      description:
        'Queues one e-mail to one recipient from a template. Template and mail account must be the team\'s and active (422 naming the field). ' +
        'An address on the team\'s suppression list for any reason but an unsubscribe (hard bounce, repeated soft bounces, complaint, manual entry, erasure) ' +
        'is 422 `RECIPIENT_SUPPRESSED`; an unsubscribe does not stop transactional mail. ' +
        'Tracking is off unless `track_opens`/`track_clicks`. No List-Unsubscribe header unless the template uses `{{ unsubscribe_url }}`.',
      headers: IdempotencyHeaders,
      body: SubmitBody,
      response: withErrors({ 202: EmailResponse }, [409]),
    },
  }, async (request, reply) => {
    const teamId = request.auth!.teamId;
    const item = request.body;
    const key = given(item.idempotency_key) ?? request.headers['idempotency-key'] ?? null;
    const hash = requestHash('email', hashable(item));
    const email = await db.transaction().execute(async (tx) => {
      if (key) {
        const hit = (await lockIdempotencyKeys(tx, teamId, [key])).get(key);
        if (hit && hit.request_hash === hash) return hit.response;
        if (hit) throw conflict(['idempotency_key']);
      }
      const refs = await loadRefs(tx, teamId, [item]);
      const details = check(item, refs, '');
      if (details.length > 0) throw validationFailed(details);
      const to = normalizeEmail(item.to_email);
      if ((await suppressedForAllMail(tx, teamId, [to], secret())).has(to)) {
        throw new AppError('RECIPIENT_SUPPRESSED', 'this address is on the team\'s suppression list (see GET /email/suppressions); no e-mail is sent to it', [
          { field: 'to_email', message: 'is suppressed for all mail' },
        ]);
      }
      const row = toNewEmail(item, refs, false);
      const [ins] = await insertEmails(tx, teamId, [row]);
      const answer = submitted(row, ins!.id, ins!.created_at);
      if (key) await storeIdempotentAnswers(tx, teamId, [{ key, request_hash: hash, response: answer }]);
      return answer;
    });
    return reply.code(202).send({ ok: true as const, email });
  });

  app.post('/batch', {
    attachValidation: true,
    schema: {
      tags, summary: `Send up to ${BATCH_MAX} transactional e-mails at once`,
      description:
        'Validated whole: one bad item is 422 listing every bad index, and nothing is written or sent. Then one set-based write; ' +
        'ids in request order. A suppressed address gets `status: "suppressed"` and is not sent. Items may carry their own ' +
        '`idempotency_key`; the `Idempotency-Key` header covers the whole request.',
      headers: IdempotencyHeaders,
      body: BatchBody,
      response: withErrors({ 202: BatchResponse }, [409]),
    },
  }, async (request, reply) => {
    const teamId = request.auth!.teamId;
    if (request.validationError) await rejectBatch(request, (items) => db.transaction().execute((tx) => loadRefs(tx, teamId, items)));
    const items = request.body.emails;
    const headerKey = request.headers['idempotency-key'] ?? null;
    const batchHash = requestHash('batch', { emails: items });
    const details: ErrorDetail[] = [];
    const firstOfKey = new Map<string, number>();
    items.forEach((item, i) => {
      const k = given(item.idempotency_key);
      if (!k) return;
      const j = firstOfKey.get(k);
      if (j !== undefined) details.push({ field: `emails[${i}].idempotency_key`, message: `is also the key of emails[${j}]` });
      else firstOfKey.set(k, i);
    });
    if (details.length > 0) throw validationFailed(details);

    const emails = await db.transaction().execute(async (tx) => {
      if (headerKey) {
        const hit = (await lockIdempotencyKeys(tx, teamId, [headerKey])).get(headerKey);
        if (hit && hit.request_hash === batchHash) return hit.response as { id: string; status: string }[];
        if (hit) throw conflict(['Idempotency-Key']);
      }
      const hashes = items.map((item) => requestHash('email', hashable(item)));
      const stored = await lockIdempotencyKeys(tx, teamId, [...firstOfKey.keys()]);
      const replay = new Map<number, { id: string; status: string }>();
      const conflicts: string[] = [];
      items.forEach((item, i) => {
        const hit = item.idempotency_key ? stored.get(item.idempotency_key) : undefined;
        if (!hit) return;
        if (hit.request_hash === hashes[i]) replay.set(i, { id: hit.response.id, status: hit.response.status });
        else conflicts.push(`emails[${i}].idempotency_key`);
      });
      if (conflicts.length > 0) throw conflict(conflicts);

      const fresh = items.map((item, i) => ({ item, i })).filter(({ i }) => !replay.has(i));
      const refs = await loadRefs(tx, teamId, fresh.map((f) => f.item));
      for (const { item, i } of fresh) details.push(...check(item, refs, `emails[${i}].`));
      if (details.length > 0) throw validationFailed(details, `${new Set(details.map((d) => d.field.split('.')[0])).size} of ${items.length} e-mails are invalid; nothing was sent`);
      const suppressed = await suppressedForAllMail(tx, teamId, fresh.map((f) => normalizeEmail(f.item.to_email)), secret());
      const rows = fresh.map(({ item }) => toNewEmail(item, refs, suppressed.has(normalizeEmail(item.to_email))));
      const inserted = await insertEmails(tx, teamId, rows);
      const answers: { key: string; request_hash: string; response: unknown }[] = [];
      fresh.forEach(({ item, i }, n) => {
        const answer = submitted(rows[n]!, inserted[n]!.id, inserted[n]!.created_at);
        replay.set(i, { id: answer.id, status: answer.status });
        if (item.idempotency_key) answers.push({ key: item.idempotency_key, request_hash: hashes[i]!, response: answer });
      });
      const out = items.map((_, i) => replay.get(i)!);
      if (headerKey) answers.push({ key: headerKey, request_hash: batchHash, response: out });
      await storeIdempotentAnswers(tx, teamId, answers);
      return out;
    });
    return reply.code(202).send({ ok: true as const, emails: emails as { id: string; status: 'queued' | 'suppressed' }[] });
  });

  app.get('/:id', {
    attachValidation: true,
    schema: {
      tags, summary: 'Get a message with its timeline',
      description: 'Any message of the team, transactional or campaign (`source`), with `events`: queued, sent, deferred, bounced, failed, opened, clicked.',
      params: IdParams,
      response: withErrors({ 200: EmailDetailResponse }, [404]),
    },
  }, async (request) => {
    rejectInvalidId(request, 'e-mail');
    const teamId = request.auth!.teamId;
    const found = await emailWithTimeline(db, teamId, request.params.id);
    if (!found) throw notFound('e-mail');
    return { ok: true as const, email: { ...toEmail(found.row), events: found.events } };
  });

  app.get('', {
    schema: {
      tags, summary: "List the team's messages",
      description: 'Transactional and campaign messages, newest first; filters `status`, `source`, `to_email`.',
      querystring: ListQuery,
      response: withErrors({ 200: EmailListResponse }),
    },
  }, async (request) => {
    const q = request.query;
    const page = q.page ?? 1;
    const perPage = q.per_page ?? 20;
    const { rows, total } = await listEmails(db, request.auth!.teamId, { page, perPage, status: q.status, source: q.source, to_email: q.to_email });
    return { ok: true as const, emails: rows.map(toEmail), meta: pageMeta(page, perPage, total) };
  });
};
