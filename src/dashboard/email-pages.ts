// Transactional e-mails: the team's message log filtered to `source =
// transactional` (status, recipient, numbered pages) and one message of any
// source (transactional or campaign) with its whole timeline, read through the same functions as GET /email/emails and
// GET /email/emails/{id}.
import type { FastifyInstance } from 'fastify';
import { listEmails, publicStatus } from '../mail/emails-queries.ts';
import { EMAIL_STATUSES, type EmailStatus } from '../mail/emails-schemas.ts';
import { emailWithTimeline } from '../mail/emails-timeline.ts';
import { describeEvent } from './email-timeline-view.ts';
import { queryField, signedIn, user, UUID_RE } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { csvReply, periodOf, periodStats, statsPanel, wantsCsv } from './stats-view.ts';
import { render } from './views.ts';

export const EMAILS_PER_PAGE = 20;
// OFFSET paging reads every skipped row; past this a filter finds a message faster.
const MAX_PAGE = 500;
/** Messages counted for the pager, at most: the pages reach no further ("10,000+" past it). Counting a team's 500,000 took 65 ms a view (bench/scale.ts). */
const COUNT_CAP = MAX_PAGE * EMAILS_PER_PAGE;

export async function emailPages(app: FastifyInstance): Promise<void> {
  const { db } = app.deps;

  app.get('/emails', signedIn, async (request, reply) => {
    const raw = queryField(request.query, 'status', 20);
    const status = (EMAIL_STATUSES as readonly string[]).includes(raw) ? (raw as EmailStatus) : undefined;
    // Stored lower-cased (emails-routes.ts); listEmails lower-cases the filter too.
    const to = queryField(request.query, 'to_email', 320).trim();
    const asked = Number.parseInt(queryField(request.query, 'page', 6), 10);
    const page = Number.isInteger(asked) && asked >= 1 ? Math.min(asked, MAX_PAGE) : 1;
    const { rows, total } = await listEmails(db, user(request).teamId, {
      page, perPage: EMAILS_PER_PAGE, source: 'transactional', ...(status ? { status } : {}), ...(to ? { to_email: to } : {}),
    }, COUNT_CAP);
    const lastPage = Math.min(MAX_PAGE, Math.max(1, Math.ceil(total / EMAILS_PER_PAGE)));
    const query = (p: number) => new URLSearchParams({ ...(status ? { status } : {}), ...(to ? { to_email: to } : {}), page: String(p) }).toString();
    return render(request, reply, 'emails', {
      emails: rows.map((r) => ({ ...r, status: publicStatus(r.status) })),
      statuses: EMAIL_STATUSES,
      status: status ?? '',
      to_email: to,
      page,
      last_page: lastPage,
      total: total > COUNT_CAP ? `${COUNT_CAP.toLocaleString('en-US')}+` : total.toLocaleString('en-US'),
      prev: page > 1 ? query(page - 1) : null,
      next: page < lastPage ? query(page + 1) : null,
    });
  });

  // Transactional mail's statistics: the stats panel of GET /email/emails/stats.
  app.get('/emails/stats', signedIn, async (request, reply) => {
    const teamId = user(request).teamId;
    const period = periodOf(request);
    const stats = await periodStats(db, teamId, { kind: 'transactional' }, period);
    if (wantsCsv(request)) return csvReply(reply, stats, `transactional-${period}`);
    return render(request, reply, 'emails-stats', { panel: statsPanel(stats, period, '/emails/stats') });
  });

  app.get<{ Params: { id: string } }>('/emails/:id', signedIn, async (request, reply) => {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const found = await emailWithTimeline(db, user(request).teamId, request.params.id);
    if (!found) throw pageNotFound();
    // Every kind of the timeline, those added after this page included (email-timeline-view.ts).
    const events = found.events.map(describeEvent);
    return render(request, reply, 'email', { email: { ...found.row, status: publicStatus(found.row.status) }, events });
  });
}
