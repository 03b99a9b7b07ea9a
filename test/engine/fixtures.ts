// Shared set-up of the engine tests: a team with a mail account pointing at a
// capturing SMTP sink on 127.0.0.1, templates and campaigns made through the
// API, and a worker drain (graphile-worker runOnce until nothing is due).
import type { MailDnsResolver } from '../../src/verification/check.ts';
import { Logger, runOnce } from 'graphile-worker';
import { sql } from 'kysely';
import type { Config } from '../../src/config.ts';
import { decideBatch, waitingTeams, type Clock, type DecideOpts } from '../../src/campaigns/engine.ts';
import { buildTaskList, decideOptions } from '../../src/tasks.ts';
import { makeTeam, testConfig, type TestApp } from '../helpers.ts';

type Inject = { statusCode: number; json(): any; body: string };

export function api(t: TestApp, key: string) {
  const headers = { 'x-api-key': key };
  return {
    post: (url: string, payload?: unknown): Promise<Inject> =>
      t.app.inject({ method: 'POST', url: `/public/v1${url}`, headers, ...(payload === undefined ? {} : { payload: payload as object }) }),
    get: (url: string): Promise<Inject> => t.app.inject({ method: 'GET', url: `/public/v1${url}`, headers }),
  };
}

export type Api = ReturnType<typeof api>;

export async function insertAccount(
  t: TestApp,
  teamId: string,
  port: number,
  opts: { daily_limit?: number; campaign_share_percent?: number; status?: 'active' | 'disabled'; from_email?: string } = {},
): Promise<string> {
  const row = await t.database.db
    .insertInto('mail_accounts')
    .values({
      team_id: teamId, host: '127.0.0.1', port, security: 'none', from_email: opts.from_email ?? 'news@plover.test',
      from_name: 'Plover News', daily_limit: opts.daily_limit ?? 500, status: opts.status ?? 'active',
      campaign_share_percent: opts.campaign_share_percent ?? 90,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export async function createTemplate(a: Api, body: Record<string, unknown> = {}): Promise<string> {
  const res = await a.post('/email/templates', {
    name: 'Welcome', content_type: 'html', subject: 'Hello {{ contact.first_name | default: "there" }}',
    content: '<html><body><p>Hi {{ contact.first_name }}</p><a href="https://example.com/offer?a=1&b=2">Offer</a></body></html>',
    ...body,
  });
  if (res.statusCode !== 201) throw new Error(`template: ${res.body}`);
  return res.json().template.id;
}

export async function createCampaign(a: Api, body: Record<string, unknown>): Promise<{ id: string; sendId: string }> {
  const res = await a.post('/email/campaigns', { name: 'Campaign', events: ['contact.saved'], ...body });
  if (res.statusCode !== 201) throw new Error(`campaign: ${res.body}`);
  const c = res.json().campaign;
  return { id: c.id, sendId: c.campaign_sends[0].id };
}

export type Setup = { teamId: string; key: string; a: Api; accountId: string; templateId: string };

/** A team with one account on the sink and one template. */
export async function setup(t: TestApp, port: number, template: Record<string, unknown> = {}): Promise<Setup> {
  const { teamId, key } = await makeTeam(t.database.db);
  const a = api(t, key);
  const accountId = await insertAccount(t, teamId, port);
  const templateId = await createTemplate(a, template);
  return { teamId, key, a, accountId, templateId };
}

/**
 * Job failures of the last `drain()` (graphile-worker logs them at level
 * error), so a test that finds a job not done can say why in its message.
 */
export const drainFailures: string[] = [];
const quiet = new Logger(() => (level, message) => {
  if (level === 'error') drainFailures.push(message);
});

/**
 * Decides every waiting trigger event now, as the decider loop
 * (campaigns/decider.ts) would, until nothing is waiting. Throws when events
 * stay busy (another decider) or held by other transactions for 10 s, and when
 * a batch waits 10 s for a lock.
 */
export async function decideAllWaiting(db: TestApp['database']['db'], decide: DecideOpts, clock: Clock = () => new Date()): Promise<void> {
  const opts = { ...decide, lockTimeoutMs: 10_000 };
  let progressAt = Date.now();
  for (;;) {
    const teams = await waitingTeams(db, null, 10_000);
    if (teams.length === 0) return;
    let worked = false;
    for (const team of teams) {
      while ((await decideBatch(db, team, clock, opts)) === 'decided') worked = true;
    }
    if (worked) progressAt = Date.now();
    else {
      if (Date.now() - progressAt > 10_000) throw new Error('decideAllWaiting: waiting events stayed busy or held by other transactions for 10 s');
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

/**
 * Runs the worker until no job is due (jobs a job adds with no delay included)
 * and no trigger event waits for the campaign decider loop (decided here as
 * the loop would: campaigns/decider.ts).
 */
export async function drain(t: TestApp, opts: { config?: Partial<Config>; now?: Clock; mailDns?: MailDnsResolver } = {}): Promise<void> {
  const config = testConfig({ sendRetryDelays: [0, 0], ...opts.config });
  const deps = { db: t.database.db, config, now: opts.now, mailDns: opts.mailDns };
  const taskList = buildTaskList(deps);
  drainFailures.length = 0;
  for (let i = 0; i < 20; i++) {
    await decideAllWaiting(t.database.db, decideOptions(deps), opts.now);
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM graphile_worker._private_jobs
       WHERE run_at <= now() AND locked_at IS NULL AND attempts < max_attempts`.execute(t.database.db);
    if (rows[0].n === 0) return;
    await runOnce({ pgPool: t.database.pool, taskList, concurrency: 2, logger: quiet });
  }
  throw new Error('jobs kept coming');
}

export async function sendLog(t: TestApp, teamId: string) {
  return t.database.db.selectFrom('email_send_log').selectAll().where('team_id', '=', teamId).orderBy('created_at').orderBy('id').execute();
}

export async function eventsNamed(t: TestApp, teamId: string, name: string) {
  return t.database.db.selectFrom('events').selectAll().where('team_id', '=', teamId).where('name', '=', name).orderBy('created_at').execute();
}

export async function contactByEmail(t: TestApp, teamId: string, email: string) {
  return t.database.db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('email', '=', email).executeTakeFirstOrThrow();
}
