import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { savedPayload, toPatches, upsertContacts } from '../../src/contacts/queries.ts';
import pg from 'pg';
import { createDb } from '../../src/db/pool.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { buildTestApp, listeningCampaign, makeTeam, testConfig, type TestApp } from '../helpers.ts';

describe('contacts: events emitted exactly for real changes', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());
  const post = (key: string, url: string, payload: unknown) =>
    t.app.inject({ method: 'POST', url: `/public/v1/email/contacts/${url}`, headers: { 'x-api-key': key }, payload: payload as object });
  const events = (teamId: string) =>
    t.database.db.selectFrom('events').selectAll().where('team_id', '=', teamId).orderBy('id').execute();
  const jobsFor = async (ids: string[]) => {
    const { rows } = await t.database.pool.query(
      `SELECT j.payload FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = 'process_events'`,
    );
    const queued = new Set(rows.flatMap((r) => r.payload.event_ids as string[]));
    return ids.filter((id) => queued.has(id));
  };
  /** The ids among `ids` left to the campaign decider loop: undecided, unprocessed, with no job. */
  const waitingForDecider = async (ids: string[]) => {
    const { rows } = await t.database.pool.query(
      'SELECT id FROM events WHERE id = ANY ($1::uuid[]) AND decided_at IS NULL AND processed_at IS NULL ORDER BY id', [ids]);
    const jobs = new Set(await jobsFor(ids));
    return rows.map((r) => r.id as string).filter((id) => !jobs.has(id));
  };

  test('create and change emit contact.saved with the 6.3 payload; an unchanged upsert emits nothing', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listeningCampaign(t.database.db, teamId);
    await post(key, 'upsert', { email: 'e@x.io', first_name: 'E', phone: '+1' });
    let ev = await events(teamId);
    assert.equal(ev.length, 1);
    assert.equal(ev[0].name, 'contact.saved');
    assert.deepEqual(Object.keys(ev[0].payload).sort(), [
      'contact_id', 'country_code', 'created_at', 'email', 'first_name', 'foreign_id', 'last_name', 'phone', 'updated_at',
    ]);
    assert.equal(ev[0].payload.email, 'e@x.io');
    assert.equal(ev[0].payload.first_name, 'E');
    assert.equal(ev[0].contact_id, ev[0].payload.contact_id);

    await post(key, 'upsert', { email: 'e@x.io', first_name: 'E' }); // same value
    await post(key, 'upsert', { email: 'E@X.io', tags: [] }); // nothing new
    assert.equal((await events(teamId)).length, 1, 'no event for an unchanged upsert');

    await post(key, 'upsert', { email: 'e@x.io', tags: ['new'] });
    await post(key, 'upsert', { email: 'e@x.io', first_name: 'F' });
    ev = await events(teamId);
    assert.equal(ev.length, 3);
    assert.equal(ev[2].payload.first_name, 'F');
    assert.deepEqual(await waitingForDecider(ev.map((e) => e.id)), ev.map((e) => e.id), 'every event waits for the decider loop, with no job');
  });

  test('bulk upsert emits one event per real change, with few jobs (a webhook\'s) or none (a campaign\'s)', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await createWebhook(t.database.db, webhookSecretBox(testConfig().appSecret), teamId, { url: 'https://hooks.example.com/b', events: ['email.contact.saved'] });
    const contacts = Array.from({ length: 600 }, (_, i) => ({ email: `b${i}@x.io`, first_name: 'x' }));
    await post(key, 'bulk-upsert', { contacts });
    contacts[5].first_name = 'changed';
    contacts[9].first_name = 'changed';
    await post(key, 'bulk-upsert', { contacts });
    const ev = await events(teamId);
    assert.equal(ev.length, 602);
    const { rows } = await t.database.pool.query(
      `SELECT count(*)::int AS n FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
       WHERE t.identifier = 'process_events' AND (j.payload::jsonb)->'event_ids' ?| $1::text[]`,
      [ev.map((e) => e.id)],
    );
    assert.ok(rows[0].n >= 2 && rows[0].n <= 3, `600 + 2 events in ${rows[0].n} jobs`);
    assert.ok(ev.every((e) => e.decided_at !== null && e.processed_at === null), 'decided (no campaign), left to their jobs');

    // A campaign listening too: no job at all, the decider loop decides them and fans them out.
    const other = await makeTeam(t.database.db);
    await createWebhook(t.database.db, webhookSecretBox(testConfig().appSecret), other.teamId, { url: 'https://hooks.example.com/c', events: ['email.contact.saved'] });
    await listeningCampaign(t.database.db, other.teamId);
    await post(other.key, 'bulk-upsert', { contacts });
    const waiting = await events(other.teamId);
    assert.equal(waiting.length, 600);
    assert.deepEqual(await waitingForDecider(waiting.map((e) => e.id)), waiting.map((e) => e.id).sort());
  });

  test('without a campaign triggered by contact.saved or a webhook subscribed to it, the events are recorded decided and processed, with no job', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listeningCampaign(t.database.db, teamId, ['lead.created']); // another trigger
    await post(key, 'upsert', { email: 'solo@x.io' });
    await post(key, 'bulk-upsert', { contacts: [{ email: 'solo@x.io', first_name: 'S' }, { email: 'duo@x.io' }] });
    let ev = await events(teamId);
    assert.equal(ev.length, 3);
    assert.ok(ev.every((e) => e.processed_at !== null && e.decided_at !== null), 'recorded decided and processed');
    assert.deepEqual(await jobsFor(ev.map((e) => e.id)), [], 'no job');

    // A webhook subscribed to it: a job for the fan-out; still nothing for the decider.
    await createWebhook(t.database.db, webhookSecretBox(testConfig().appSecret), teamId, { url: 'https://hooks.example.com/x', events: ['email.contact.saved'] });
    await post(key, 'upsert', { email: 'solo@x.io', first_name: 'T' });
    ev = (await events(teamId)).slice(3);
    assert.equal(ev.length, 1);
    assert.equal(ev[0].processed_at, null);
    assert.notEqual(ev[0].decided_at, null);
    assert.deepEqual(await jobsFor([ev[0].id]), [ev[0].id]);
  });

  test('the payload the upsert statement builds in SQL is savedPayload() of the stored row, to the millisecond', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listeningCampaign(t.database.db, teamId);
    const contacts = [
      { email: 'Full@X.io', first_name: 'Ada', last_name: 'L', phone: '+44 1', foreign_id: 'crm-1', country_code: 'gb' },
      { email: 'bare@x.io' }, // every optional field null
      { email: 'odd@x.io', first_name: 'Ünïcødé "quoted" \\ back', last_name: '' },
    ];
    await post(key, 'bulk-upsert', { contacts });
    // Microseconds that round up but must truncate, as Date#toISOString() of the parsed row does.
    await t.database.pool.query(
      `UPDATE contacts SET created_at = '2024-02-29T23:59:59.999999Z' WHERE team_id = $1 AND email = 'full@x.io'`,
      [teamId],
    );
    await post(key, 'bulk-upsert', { contacts: [{ email: 'full@x.io', first_name: 'Ada2' }, { email: 'bare@x.io', tags: ['t'] }] });
    const ev = await events(teamId);
    assert.equal(ev.length, 5);
    const rows = await t.database.db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).execute();
    const byId = new Map(rows.map((r) => [r.id, r]));
    const latest = new Map(ev.map((e) => [e.contact_id, e.payload]));
    for (const [id, payload] of latest) assert.deepEqual(payload, savedPayload(byId.get(id!)!), `payload of ${byId.get(id!)!.email}`);
    assert.equal(latest.get(rows.find((r) => r.email === 'full@x.io')!.id)!.created_at, '2024-02-29T23:59:59.999Z');
    assert.deepEqual(await waitingForDecider(ev.map((e) => e.id)), ev.map((e) => e.id), 'every event waits for the decider loop');

    // The same from a session in a zone off UTC by a half hour: the times are still UTC.
    const pool = new pg.Pool({ connectionString: t.database.url, max: 1, options: '-c TimeZone=America/St_Johns' });
    const db = createDb(pool);
    try {
      await db.transaction().execute((tx) => upsertContacts(tx, teamId, toPatches([{ email: 'zone@x.io', first_name: 'Z' }])));
    } finally {
      await db.destroy();
    }
    const zone = await t.database.db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('email', '=', 'zone@x.io').executeTakeFirstOrThrow();
    const [saved] = (await events(teamId)).filter((e) => e.contact_id === zone.id);
    assert.deepEqual(saved!.payload, savedPayload(zone));
  });

  test('unsubscribe emits contact.unsubscribed once, with method and reason', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await post(key, 'unsubscribe', { email: 'q@x.io', reason: 'spam' });
    await post(key, 'unsubscribe', { email: 'q@x.io', reason: 'again' });
    const ev = (await events(teamId)).filter((e) => e.name === 'contact.unsubscribed');
    assert.equal(ev.length, 1);
    assert.equal(ev[0].payload.unsubscribe_method, 'api');
    assert.equal(ev[0].payload.unsubscribe_reason, 'spam');
    assert.equal(ev[0].payload.email, 'q@x.io');
  });

  test('a rolled-back change emits nothing and enqueues nothing', async () => {
    const { teamId } = await makeTeam(t.database.db);
    await listeningCampaign(t.database.db, teamId); // its events would have a job
    const { rows: before } = await t.database.pool.query('SELECT count(*)::int AS n FROM graphile_worker._private_jobs');
    await assert.rejects(
      t.database.db.transaction().execute(async (tx) => {
        await upsertContacts(tx, teamId, toPatches([{ email: 'rb@x.io', first_name: 'R' }]));
        throw new Error('later step failed');
      }),
      /later step failed/,
    );
    assert.equal((await events(teamId)).length, 0);
    const { rows: contacts } = await t.database.pool.query('SELECT count(*)::int AS n FROM contacts WHERE team_id = $1', [teamId]);
    assert.equal(contacts[0].n, 0);
    const { rows: afterJobs } = await t.database.pool.query('SELECT count(*)::int AS n FROM graphile_worker._private_jobs');
    assert.equal(afterJobs[0].n, before[0].n);
  });

  test('concurrent upserts of the same new address: one create, no lost fields, no error', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => post(key, 'upsert', { email: 'race@x.io', [`custom_int_${(i % 5) + 1}`]: i + 1 })),
    );
    for (const r of results) assert.equal(r.statusCode, 200, r.body);
    assert.equal(results.filter((r) => r.json().created).length, 1);
    const row = await t.database.db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).executeTakeFirstOrThrow();
    for (let f = 1; f <= 5; f++) assert.notEqual((row as Record<string, unknown>)[`custom_int_${f}`], null, `custom_int_${f} kept`);
  });
});
