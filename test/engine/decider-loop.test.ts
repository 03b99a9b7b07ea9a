// The campaign decider loop (campaigns/decider.ts): a trigger event a campaign
// listens to is written with no process_events job, and a running worker's
// loop decides it, fans it out to the team's webhooks and marks it processed
// in one transaction; teams are taken round by round; its work list is a
// loose scan of events_undecided_idx.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import pino from 'pino';
import { startWorker, type WorkerHandle } from '../../src/background.ts';
import { CampaignDecider } from '../../src/campaigns/decider.ts';
import { waitingTeams } from '../../src/campaigns/engine.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { decideOptions } from '../../src/tasks.ts';
import { buildTestApp, listeningCampaign, makeTeam, testConfig, type TestApp, until } from '../helpers.ts';
import { indexesOf, planNodes } from '../lib/plans.ts';
import { captured } from '../lib/statements.ts';
import { createCampaign, setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';

describe('campaign decider loop', () => {
  let t: TestApp;
  let sink: CaptureSink;
  let worker: WorkerHandle | undefined;
  before(async () => {
    t = await buildTestApp({ config: { allowedPrivateTargets: ['127.0.0.1'] } });
    sink = await startCaptureSink();
  });
  after(async () => {
    await worker?.stop();
    closeTransports();
    await sink.close();
    await t.close();
  });
  const q = async (text: string, values: unknown[] = []) => (await t.database.pool.query(text, values)).rows;

  test('a running worker decides a listened-to trigger with no job, fans it out and marks it processed; the e-mail goes out', { timeout: 60_000 }, async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], event_triggered_send: { contact_cooldown_interval: 0 } });
    const hook = await s.a.post('/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.lead.created'] });
    assert.equal(hook.statusCode, 201, hook.body);
    await s.a.post('/email/campaigns', { name: 'Leads', events: ['lead.created'], template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const res = await s.a.post('/email/events', { event_name: 'lead.created', email: 'loop@example.com' });
    assert.equal(res.statusCode, 202, res.body);
    const id = res.json().event_id as string;
    const [jobs] = await q(`SELECT count(*)::int AS n FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
                             WHERE k.identifier = 'process_events'`);
    assert.equal(jobs.n, 0, 'no process_events job');
    const before = sink.messages.length;
    worker = await startWorker(t.database.pool, { db: t.database.db, config: testConfig({ allowedPrivateTargets: ['127.0.0.1'] }) }, pino({ level: 'silent' }));
    await until('the event to be decided and processed', async () =>
      (await q('SELECT decided_at IS NOT NULL AND processed_at IS NOT NULL AS done FROM events WHERE id = $1', [id]))[0].done, 10_000);
    const decisions = await q('SELECT decision FROM campaign_decisions WHERE event_id = $1', [id]);
    assert.deepEqual(decisions.map((d) => d.decision), ['send']);
    const deliveries = await q('SELECT event FROM webhook_deliveries WHERE event_id = $1', [id]);
    assert.deepEqual(deliveries.map((d) => d.event), ['email.lead.created'], 'fanned out with its decision');
    await until('the e-mail at the sink', async () => sink.messages.length > before, 10_000);
    await worker.stop();
    worker = undefined;
  });

  for (const pageSize of [100, 2]) test(`a pass takes one batch of each waiting team (teams read ${pageSize} at a time)`, async () => {
    const teams: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { teamId } = await makeTeam(t.database.db);
      await listeningCampaign(t.database.db, teamId, ['contact.saved']);
      // 501 waiting events: one batch (500) leaves one.
      await sql`INSERT INTO contacts (team_id, email) SELECT ${teamId}::uuid, 'r' || i || '@example.com' FROM generate_series(1, 501) AS i`.execute(t.database.db);
      await sql`INSERT INTO events (team_id, name, contact_id, payload)
                SELECT team_id, 'contact.saved', id, '{}'::jsonb FROM contacts WHERE team_id = ${teamId}::uuid`.execute(t.database.db);
      teams.push(teamId);
    }
    teams.sort();
    const waiting = await waitingTeams(t.database.db, null, 100);
    assert.deepEqual(waiting.filter((x) => teams.includes(x)), teams);
    assert.deepEqual(await waitingTeams(t.database.db, teams[0]!, 1), [teams[1]], 'after a team: the next one');
    const left = async () => Object.fromEntries((await q(
      `SELECT team_id, count(*)::int AS n FROM events WHERE team_id = ANY ($1::uuid[]) AND decided_at IS NULL GROUP BY team_id`, [teams])).map((r) => [r.team_id, r.n]));
    const d = new CampaignDecider({ db: t.database.db, decide: decideOptions({ db: t.database.db, config: testConfig() }), log: pino({ level: 'silent' }), pollMs: 20, pageSize });
    const order: string[] = [];
    const batches = await captured(/SELECT id FROM events\s+WHERE team_id = \$1 AND decided_at IS NULL/, async () => {
      d.start();
      await until('every team decided', async () => Object.keys(await left()).length === 0, 20_000);
      await d.stop();
    });
    for (const b of batches) if (teams.includes(b.values[0] as string)) order.push(b.values[0] as string);
    // Pass 1: a batch of each team (two lanes); pass 2: their last events. The passes overlap
    // by a batch (a lane starts the next pass while the other finishes this one), so the
    // first four batches hold every team; a loop that kept to the first page (or to one
    // team until its backlog was gone) would show only two of them.
    assert.ok(order.length >= 6, `order: ${order.join(' ')}`);
    assert.deepEqual(new Set(order.slice(0, 4)), new Set(teams), `order: ${order.join(' ')}`);
    const processed = await q('SELECT count(*)::int AS n FROM events WHERE team_id = ANY ($1::uuid[]) AND processed_at IS NULL', [teams]);
    assert.equal(processed[0].n, 0, 'all processed');
  });

  test('the work list reads events_undecided_idx only, one descent per team found', async () => {
    const { teamId } = await makeTeam(t.database.db);
    await sql`ANALYZE events`.execute(t.database.db);
    const [sent] = await captured(/WITH RECURSIVE t\(team_id\)/, () => waitingTeams(t.database.db, teamId, 100));
    assert.ok(sent, 'waitingTeams sent its statement');
    const text = sent.text.replace(/^\/\* prepared \*\//, '');
    const nodes = await planNodes(t.database.pool, { text, values: sent.values }, { analyze: true });
    const scans = nodes.filter((n) => n['Relation Name'] === 'events');
    assert.ok(scans.length > 0, JSON.stringify(nodes.map((n) => n['Node Type'])));
    assert.deepEqual(indexesOf(nodes, 'events'), ['events_undecided_idx'], JSON.stringify(scans.map((n) => [n['Node Type'], n['Index Name']])));
    assert.ok(scans.every((n) => n['Node Type'] !== 'Seq Scan'));
  });
});
