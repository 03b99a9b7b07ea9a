// emit() records an event that no handler has work for (not a campaign trigger
// with a contact, no webhook of its team subscribed) as processed, without a
// process_events job; every other event gets its job, as before.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { emit, type NewEvent } from '../../src/events/emit.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

/** Emits in one transaction; per event (in order): recorded processed, and whether a process_events job carries it. */
async function emitted(events: NewEvent[]): Promise<{ name: string; processed: boolean; job: boolean }[]> {
  const ids = await t.database.db.transaction().execute((tx) => emit(tx, events));
  assert.equal(ids.length, events.length);
  const { rows } = await sql<{ id: string; name: string; processed: boolean; job: boolean }>`
    SELECT e.id, e.name, e.processed_at IS NOT NULL AS processed,
           EXISTS (SELECT 1 FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
                    WHERE k.identifier = 'process_events' AND (j.payload::jsonb -> 'event_ids') ? e.id::text) AS job
      FROM events e WHERE e.id = ANY (${ids}::uuid[])`.execute(t.database.db);
  return ids.map((id) => {
    const r = rows.find((x) => x.id === id)!;
    return { name: r.name, processed: r.processed, job: r.job };
  });
}

async function contact(teamId: string, email: string): Promise<string> {
  const { rows } = await sql<{ id: string }>`INSERT INTO contacts (team_id, email) VALUES (${teamId}::uuid, ${email}) RETURNING id`.execute(t.database.db);
  return rows[0]!.id;
}

test('a team without webhooks: e-mail and unsubscribe events are recorded processed with no job; a trigger with a contact gets its job', async () => {
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
  ]), [
    { name: 'email.sent', processed: true, job: false },
    { name: 'email.opened', processed: true, job: false },
    { name: 'contact.unsubscribed', processed: true, job: false },
    { name: 'contact.saved', processed: false, job: true },
    { name: 'lead.created', processed: false, job: true },
    { name: 'sale.created', processed: true, job: false },
  ]);
});

test('a team with webhooks: only the events one of them subscribes to get a job; another team\'s webhooks do not count', async () => {
  const box = webhookSecretBox(testConfig().appSecret);
  const { teamId } = await makeTeam(t.database.db, 'Hooks');
  const { teamId: other } = await makeTeam(t.database.db, 'Neighbour');
  await createWebhook(t.database.db, box, teamId, { url: 'https://hooks.example.com/a', events: ['email.sent', 'email.contact.unsubscribed'] });
  await createWebhook(t.database.db, box, other, { url: 'https://hooks.example.com/b', events: ['email.opened', 'email.sale.created'] });
  const c = await contact(teamId, 'b@example.com');
  assert.deepEqual(await emitted([
    { teamId, name: 'email.sent', contactId: c, payload: {} },
    { teamId, name: 'email.opened', contactId: c, payload: {} },
    { teamId, name: 'contact.unsubscribed', contactId: c, payload: {} },
    { teamId, name: 'sale.created', contactId: null, payload: {} },
  ]), [
    { name: 'email.sent', processed: false, job: true },
    { name: 'email.opened', processed: true, job: false },
    { name: 'contact.unsubscribed', processed: false, job: true },
    { name: 'sale.created', processed: true, job: false },
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
