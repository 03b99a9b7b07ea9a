// Suppressions: the team's list (e-mail prefix search, reason filter, numbered
// pages), a form that adds up to 1,000 addresses, and a Remove button for the
// entries a team may remove. Read and written through the same functions as
// the API (contacts/suppressions.ts), so the rules are the same.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  addSuppressions, CLIENT_REASONS, listSuppressions, REMOVABLE_REASONS, removeSuppression, SUPPRESSION_REASONS, suppressionView,
  type ClientReason, type SuppressionReason,
} from '../contacts/suppressions.ts';
import { SUPPRESSIONS_MAX } from '../contacts/suppression-schemas.ts';
import { isEmail } from '../http/schemas.ts';
import { AppError } from '../lib/errors.ts';
import { normalizeEmail } from '../lib/text.ts';
import { field, queryField, signedIn, signedInPost, user } from './forms.ts';
import { PageError } from './page-error.ts';
import { render } from './views.ts';

export const SUPPRESSIONS_PER_PAGE = 20;
// OFFSET paging reads every skipped row; past this a search finds an address faster.
const MAX_PAGE = 500;
const BASE = '/suppressions';

const DONE: Record<string, string> = {
  added: 'The addresses are on the list: no e-mail goes to them.',
  removed: 'The entry was removed: the address may be mailed again.',
  kept: 'The team’s entry was removed, but the recipient’s unsubscribe stays: no marketing e-mail goes to the address.',
};

export async function suppressionPages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;

  async function listPage(request: FastifyRequest, extra: Record<string, unknown> = {}) {
    // Stored lower-cased, so the search is too.
    const q = queryField(request.query, 'q', 320).trim().toLowerCase();
    const raw = queryField(request.query, 'reason', 20);
    const reason = (SUPPRESSION_REASONS as string[]).includes(raw) ? (raw as SuppressionReason) : undefined;
    const asked = Number.parseInt(queryField(request.query, 'page', 6), 10);
    const page = Number.isInteger(asked) && asked >= 1 ? Math.min(asked, MAX_PAGE) : 1;
    const { rows, total } = await listSuppressions(db, user(request).teamId, {
      page, perPage: SUPPRESSIONS_PER_PAGE, ...(reason ? { reason } : {}), ...(q ? { search: q } : {}),
    });
    const lastPage = Math.min(MAX_PAGE, Math.max(1, Math.ceil(total / SUPPRESSIONS_PER_PAGE)));
    const query = (p: number) => new URLSearchParams({ ...(q ? { q } : {}), ...(reason ? { reason } : {}), page: String(p) }).toString();
    return {
      entries: rows.map((r) => ({ ...suppressionView(r), removable: r.email !== null && REMOVABLE_REASONS.includes(r.reason) })),
      reasons: SUPPRESSION_REASONS,
      client_reasons: CLIENT_REASONS,
      q,
      reason: reason ?? '',
      page,
      last_page: lastPage,
      total,
      prev: page > 1 ? query(page - 1) : null,
      next: page < lastPage ? query(page + 1) : null,
      done: DONE[queryField(request.query, 'done', 20)] ?? null,
      ...extra,
    };
  }

  app.get(BASE, signedIn, async (request, reply) => render(request, reply, 'suppressions', await listPage(request)));

  app.post(BASE, signedInPost, async (request, reply) => {
    const text = field(request.body, 'emails', config.intake.dashboardBodyLimitBytes);
    const rawReason = field(request.body, 'reason', 20) || 'manual';
    const entered = { emails: text, chosen: rawReason };
    const fail = async (error: string) => render(request, reply, 'suppressions', await listPage(request, { error, ...entered }), 422);
    if (!(CLIENT_REASONS as readonly string[]).includes(rawReason)) return fail('Choose a reason from the list.');
    const words = text.split(/[\s,;]+/).filter(Boolean);
    if (words.length === 0) return fail('Enter at least one e-mail address.');
    if (words.length > SUPPRESSIONS_MAX) return fail(`At most ${SUPPRESSIONS_MAX.toLocaleString('en')} addresses at once; you entered ${words.length}.`);
    const bad = words.filter((w) => !isEmail(w) || w.length > 320);
    if (bad.length > 0) {
      const shown = bad.slice(0, 10).join(', ') + (bad.length > 10 ? ` and ${bad.length - 10} more` : '');
      return fail(`Not e-mail addresses, nothing was added: ${shown}.`);
    }
    const reason = rawReason as ClientReason;
    await db.transaction().execute((tx) => addSuppressions(tx, user(request).teamId, words.map((w) => ({ email: normalizeEmail(w), reason }))));
    return reply.redirect(`${BASE}?done=added`, 303);
  });

  app.post(`${BASE}/remove`, signedInPost, async (request, reply) => {
    const email = normalizeEmail(field(request.body, 'email', 320));
    if (!isEmail(email)) throw new PageError(404, 'There is no entry for this address, or it belongs to another team.');
    let result;
    try {
      result = await db.transaction().execute((tx) => removeSuppression(tx, user(request).teamId, email, config.appSecret!));
    } catch (err) {
      if (err instanceof AppError && err.code === 'CONFLICT') {
        return render(request, reply, 'suppressions', await listPage(request, { error: `${email} stays on the list: ${err.message}.` }), 409);
      }
      throw err;
    }
    if (!result) throw new PageError(404, 'There is no entry for this address, or it belongs to another team.');
    return reply.redirect(`${BASE}?done=${result.remaining ? 'kept' : 'removed'}`, 303);
  });
}
