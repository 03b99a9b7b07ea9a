// The dashboard's home (an overview of the team) and its team settings (the
// team's name, which recipients read on the unsubscribe page).
import type { FastifyInstance } from 'fastify';
import { findTeam, renameTeam, teamNameProblem } from '../teams/queries.ts';
import { field, queryField, signedIn, signedInPost, user } from './forms.ts';
import { COUNT_CAP, overview, OVERVIEW_DAYS } from './overview.ts';
import { pageNotFound } from './page-error.ts';
import { csvReply, overviewBreakdown, periodOf, periodStats, statsPanel, wantsCsv } from './stats-view.ts';
import { render } from './views.ts';

export const TEAM_SETTINGS = '/settings/team';

export async function homePages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;

  app.get('/', async (request, reply) => {
    if (!request.dashboardUser) return reply.redirect('/sign-in', 303);
    const teamId = user(request).teamId;
    const period = periodOf(request);
    if (wantsCsv(request)) return csvReply(reply, await periodStats(db, teamId, { kind: 'team' }, period), `team-${period}`);
    const [data, stats, parts] = await Promise.all([
      overview(db, teamId),
      periodStats(db, teamId, { kind: 'team' }, period),
      overviewBreakdown(db, teamId, period),
    ]);
    return render(request, reply, 'overview', {
      ...data, windowDays: OVERVIEW_DAYS, cap: COUNT_CAP, panel: statsPanel(stats, period, '/'), ...parts,
    });
  });

  const settingsPage = async (teamId: string, extra: Record<string, unknown>) => {
    const team = await findTeam(db, teamId);
    if (!team) throw pageNotFound();
    return { team, publicUrl: config.publicUrl, ...extra };
  };

  app.get(TEAM_SETTINGS, signedIn, async (request, reply) => {
    const done = queryField(request.query, 'done', 20) === 'renamed';
    return render(request, reply, 'team-settings', await settingsPage(user(request).teamId, { done }));
  });

  app.post(TEAM_SETTINGS, signedInPost, async (request, reply) => {
    const teamId = user(request).teamId;
    // Checked as the CLI checks it (`plover team rename`): the same rule and words.
    const name = field(request.body, 'name', 1000).trim();
    const problem = teamNameProblem(name);
    if (problem) {
      return render(request, reply, 'team-settings', await settingsPage(teamId, { error: `The name ${problem}.`, name }), 422);
    }
    if (!(await renameTeam(db, teamId, name))) throw pageNotFound();
    return reply.redirect(`${TEAM_SETTINGS}?done=renamed`, 303);
  });
}
