// Campaigns with their sends, counts and start/stop (pause/resume of the latest send).
import type { FastifyInstance } from 'fastify';
import { transitionLatestSend } from '../campaigns/queries.ts';
import { queryField, signedIn, signedInPost, user, UUID_RE } from './forms.ts';
import { pageNotFound } from './page-error.ts';
import { campaignPage, CAMPAIGNS_PER_PAGE } from './queries.ts';
import { render } from './views.ts';

const MESSAGES: Record<string, string> = {
  started: 'Campaign started.',
  stopped: 'Campaign stopped.',
  unchanged: 'Nothing to change: the campaign was already in that state.',
  conflict: 'The campaign’s latest send is completed or failed; it cannot be started or stopped.',
  no_send: 'The campaign has no send to start or stop.',
};

export async function campaignPages(app: FastifyInstance): Promise<void> {
  const { db } = app.deps;

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

  for (const action of ['start', 'stop'] as const) {
    const [from, to] = action === 'start' ? (['paused', 'active'] as const) : (['active', 'paused'] as const);
    app.post<{ Params: { id: string } }>(`/campaigns/:id/${action}`, signedInPost, async (request, reply) => {
      const id = request.params.id;
      if (!UUID_RE.test(id)) throw pageNotFound();
      const result = await transitionLatestSend(db, user(request).teamId, id, from, to);
      let done: string;
      if (result.kind === 'changed') done = action === 'start' ? 'started' : 'stopped';
      else if (result.kind === 'unchanged') done = result.status === to ? 'unchanged' : 'conflict';
      else {
        // No send: the campaign may not exist for this team at all.
        const exists = await db.selectFrom('campaigns').select('id').where('team_id', '=', user(request).teamId).where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst();
        if (!exists) throw pageNotFound();
        done = 'no_send';
      }
      return reply.redirect(`/campaigns?done=${done}`, 303);
    });
  }
}
