// emit() records an event that no handler has work for (no campaign of its team
// triggered by it, no webhook of its team subscribed) as processed, without a
// process_events job, and a trigger event with a contact that no campaign lists
// as decided too; a trigger that a campaign lists is left to the decider loop
// (no job: campaigns/decider.ts), and every other event gets its job.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { campaignListensSql, emit, type NewEvent } from '../../src/events/emit.ts';
import { indexesOf, planNodes } from '../lib/plans.ts';
import { captured } from '../lib/statements.ts';
import { loadEventCandidates } from '../../src/campaigns/engine.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { buildTestApp, listeningCampaign, makeTeam, testConfig, type TestApp } from '../helpers.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

/** Emits in one transaction; per event (in order): recorded processed, and whether a process_events job carries it (and, with `decided`, whether it is recorded decided). */
async function emitted(events: NewEvent[], opts: { decided?: boolean } = {}): Promise<{ name: string; processed: boolean; job: boolean; decided?: boolean }[]> {
  const ids = await t.database.db.transaction().execute((tx) => emit(tx, events));
  assert.equal(ids.length, events.length);
  const { rows } = await sql<{ id: string; name: string; processed: boolean; job: boolean; decided: boolean }>`
    SELECT e.id, e.name, e.processed_at IS NOT NULL AS processed, e.decided_at IS NOT NULL AS decided,
           EXISTS (SELECT 1 FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
                    WHERE k.identifier = 'process_events' AND (j.payload::jsonb -> 'event_ids') ? e.id::text) AS job
      FROM events e WHERE e.id = ANY (${ids}::uuid[])`.execute(t.database.db);
  return ids.map((id) => {
    const r = rows.find((x) => x.id === id)!;
    return { name: r.name, processed: r.processed, job: r.job, ...(opts.decided ? { decided: r.decided } : {}) };
  });
}

async function contact(teamId: string, email: string): Promise<string> {
  const { rows } = await sql<{ id: string }>`INSERT INTO contacts (team_id, email) VALUES (${teamId}::uuid, ${email}) RETURNING id`.execute(t.database.db);
  return rows[0]!.id;
}

test('a team without webhooks or campaigns: every event is recorded processed with no job, triggers with a contact decided', async () => {
  const { teamId } = await makeTeam(t.database.db, 'No hooks');
  const c = await contact(teamId, 'a@example.com');
  assert.deepEqual(await emitted([
    { teamId, name: 'email.sent', contactId: c, payload: {} },
    { teamId, name: 'email.opened', contactId: c, payload: {} },
    { teamId, name: 'contact.unsubscribed', contactId: c, payload: {} },
    { teamId, name: 'contact.saved', contactId: c, payload: {} },
    { teamId, name: 'lead.created', contactId: c, payload: {} },
    // A trigger name without a contact: nothing for the decider (it takes events with a contact only).
    { teamId, name: 'sale.created', contactId: null, payload: {} },
  ], { decided: true }), [
    { name: 'email.sent', processed: true, job: false, decided: false },
    { name: 'email.opened', processed: true, job: false, decided: false },
    { name: 'contact.unsubscribed', processed: true, job: false, decided: false },
    { name: 'contact.saved', processed: true, job: false, decided: true },
    { name: 'lead.created', processed: true, job: false, decided: true },
    { name: 'sale.created', processed: true, job: false, decided: false },
  ]);
});

test('a team with campaigns: a trigger with a contact that one of them lists waits for the decider, with no job; deleted and other teams\' campaigns do not count', async () => {
  const { teamId } = await makeTeam(t.database.db, 'Campaigns');
  const { teamId: other } = await makeTeam(t.database.db, 'Campaigns next door');
  await listeningCampaign(t.database.db, teamId, ['contact.saved']);
  await listeningCampaign(t.database.db, teamId, ['lead.created'], true);
  await listeningCampaign(t.database.db, other, ['sale.created']);
  const c = await contact(teamId, 'c@example.com');
  assert.deepEqual(await emitted([
    { teamId, name: 'contact.saved', contactId: c, payload: {} },
    { teamId, name: 'lead.created', contactId: c, payload: {} },
    { teamId, name: 'sale.created', contactId: c, payload: {} },
    { teamId, name: 'contact.saved', contactId: null, payload: {} },
    { teamId, name: 'email.sent', contactId: c, payload: {} },
  ], { decided: true }), [
    { name: 'contact.saved', processed: false, job: false, decided: false },
    { name: 'lead.created', processed: true, job: false, decided: true },
    { name: 'sale.created', processed: true, job: false, decided: true },
    { name: 'contact.saved', processed: true, job: false, decided: false },
    { name: 'email.sent', processed: true, job: false, decided: false },
  ]);
});

test('a team with webhooks: only the events one of them subscribes to get a job; another team\'s webhooks do not count', async () => {
  const box = webhookSecretBox(testConfig().appSecret);
  const { teamId } = await makeTeam(t.database.db, 'Hooks');
  const { teamId: other } = await makeTeam(t.database.db, 'Neighbour');
  await createWebhook(t.database.db, box, teamId, { url: 'https://hooks.example.com/a', events: ['email.sent', 'email.contact.unsubscribed', 'email.lead.created'] });
  await createWebhook(t.database.db, box, other, { url: 'https://hooks.example.com/b', events: ['email.opened', 'email.sale.created'] });
  const c = await contact(teamId, 'b@example.com');
  assert.deepEqual(await emitted([
    { teamId, name: 'email.sent', contactId: c, payload: {} },
    { teamId, name: 'email.opened', contactId: c, payload: {} },
    { teamId, name: 'contact.unsubscribed', contactId: c, payload: {} },
    { teamId, name: 'sale.created', contactId: null, payload: {} },
    // Subscribed, but no campaign lists it: a job for the fan-out, recorded decided (nothing for the decider).
    { teamId, name: 'lead.created', contactId: c, payload: {} },
  ], { decided: true }), [
    { name: 'email.sent', processed: false, job: true, decided: false },
    { name: 'email.opened', processed: true, job: false, decided: false },
    { name: 'contact.unsubscribed', processed: false, job: true, decided: false },
    { name: 'sale.created', processed: true, job: false, decided: false },
    { name: 'lead.created', processed: false, job: true, decided: true },
  ]);
  // A disabled webhook still counts: its deliveries wait, parked, for its enable.
  await sql`UPDATE webhooks SET is_enabled = false WHERE team_id = ${teamId}::uuid`.execute(t.database.db);
  assert.deepEqual(await emitted([{ teamId, name: 'email.sent', contactId: c, payload: {} }]), [{ name: 'email.sent', processed: false, job: true }]);
});

test('webhook and account events keep their names in the match; a trigger name without a contact goes to its subscriber', async () => {
  const box = webhookSecretBox(testConfig().appSecret);
  const { teamId } = await makeTeam(t.database.db, 'Ops hooks');
  await createWebhook(t.database.db, box, teamId, { url: 'https://hooks.example.com/c', events: ['webhook.disabled', 'email.sale.created'] });
  assert.deepEqual(await emitted([
    { teamId, name: 'webhook.disabled', payload: { webhook_id: '00000000-0000-0000-0000-000000000000' } },
    { teamId, name: 'email.account.health', payload: {} },
    { teamId, name: 'sale.created', contactId: null, payload: {} },
  ]), [
    { name: 'webhook.disabled', processed: false, job: true },
    { name: 'email.account.health', processed: true, job: false },
    { name: 'sale.created', processed: false, job: true },
  ]);
});

test('the check for a listening campaign reads the team\'s trigger campaigns only, not its thousands of broadcasts', async () => {
  const { teamId } = await makeTeam(t.database.db, 'Many broadcasts');
  await sql`INSERT INTO campaigns (team_id, name, campaign_type, draft_data, trigger_events)
            SELECT ${teamId}::uuid, 'broadcast ' || i, 'broadcast', '{}'::jsonb, '{}'::text[] FROM generate_series(1, 3000) AS i`.execute(t.database.db);
  await listeningCampaign(t.database.db, teamId, ['lead.created']);
  await sql`ANALYZE campaigns`.execute(t.database.db);
  const nodes = await planNodes(t.database.pool, {
    text: `SELECT ${campaignListensSql('$1::uuid', "'contact.saved'")} AS campaign`, values: [teamId],
  }, { analyze: true });
  const scans = nodes.filter((n) => n['Relation Name'] === 'campaigns');
  assert.deepEqual(indexesOf(nodes, 'campaigns'), ['campaigns_trigger_idx'], JSON.stringify(scans));
  const examined = scans.reduce((sum, n) => sum + ((n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0)) * (n['Actual Loops'] ?? 1), 0);
  assert.ok(examined <= 2, `campaign rows examined: ${examined}`);

  // The decider's candidates of a batch of events: the same index.
  const c = await contact(teamId, 'many@example.com');
  const ids = await t.database.db.transaction().execute((tx) => emit(tx, [{ teamId, name: 'lead.created', contactId: c, payload: {} }]));
  const [read] = await captured(/FROM campaigns|JOIN campaigns/, () => loadEventCandidates(t.database.db, ids));
  const candidates = await planNodes(t.database.pool, read!, { analyze: true });
  assert.deepEqual(indexesOf(candidates, 'campaigns'), ['campaigns_trigger_idx'], JSON.stringify(candidates.filter((n) => n['Relation Name'] === 'campaigns')));
});
