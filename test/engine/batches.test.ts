// Batches: the decider loop's batch decides a team's waiting events together
// (events.decided_at) and fans them out, and a send_email job sends, counts
// and announces a batch of sends together.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { decideBatch } from '../../src/campaigns/engine.ts';
import type { EventRow } from '../../src/events/process.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTaskList, decideOptions } from '../../src/tasks.ts';
import { enqueueDeliveries } from '../../src/webhooks/deliveries.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { byJson } from '../lib/order.ts';
import { captured } from '../lib/statements.ts';
import { contactByEmail, createCampaign, drain, eventsNamed, sendLog, setup, type Setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';

describe('engine batches', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    // A webhook to 127.0.0.1 (never dispatched here): its deliveries show the fan-out.
    t = await buildTestApp({ config: { allowedPrivateTargets: ['127.0.0.1'] } });
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  async function trigger(s: Setup, email: string): Promise<string> {
    const res = await s.a.post('/email/events', { event_name: 'contact.saved', email });
    assert.equal(res.statusCode, 202, res.body);
    return res.json().event_id;
  }
  const eventRow = async (id: string) =>
    (await t.database.db.selectFrom('events').selectAll().where('id', '=', id).executeTakeFirstOrThrow()) as unknown as EventRow & { decided_at: Date | null; processed_at: Date | null };
  const decisionCount = async (eventId: string) =>
    Number((await sql<{ n: number }>`SELECT count(*)::int AS n FROM campaign_decisions WHERE event_id = ${eventId}`.execute(t.database.db)).rows[0]!.n);

  const opts = () => decideOptions({ db: t.database.db, config: testConfig() });
  const now = () => new Date();

  test("one batch decides its team's waiting events and processes them; other teams' events wait for their own", async () => {
    const s = await setup(t, sink.port);
    const other = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await createCampaign(other.a, { template_ids: [other.templateId], mail_account_ids: [other.accountId] });
    const ids = [await trigger(s, 'b1@example.com'), await trigger(s, 'b2@example.com'), await trigger(s, 'b3@example.com')];
    const foreign = await trigger(other, 'b1@example.com');

    assert.equal(await decideBatch(t.database.db, s.teamId, now, opts()), 'decided');
    for (const id of ids) {
      assert.equal(await decisionCount(id), 1, `event ${id} decided with the batch`);
      const row = await eventRow(id);
      assert.ok(row.decided_at && row.processed_at, 'marked decided and processed');
    }
    assert.equal(await decisionCount(foreign), 0, "another team's events are left to their own batch");
    assert.equal((await eventRow(foreign)).decided_at, null);

    // Nothing left for the team: no second decision, no second send.
    assert.equal(await decideBatch(t.database.db, s.teamId, now, opts()), 'none');
    for (const id of ids) assert.equal(await decisionCount(id), 1);
    await drain(t);
    assert.equal((await sendLog(t, s.teamId)).length, 3);
    assert.equal(await decisionCount(foreign), 1);
  });

  test('a batch fans its events out and marks them decided and processed in one update; a job of an earlier version then finds nothing to do', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const hook = await s.a.post('/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.contact.saved'] });
    assert.equal(hook.statusCode, 201, hook.body);
    const ids = [await trigger(s, 'p1@example.com'), await trigger(s, 'p2@example.com'), await trigger(s, 'p3@example.com')];
    const updates = await captured(/UPDATE events SET/, () => decideBatch(t.database.db, s.teamId, now, opts()));
    assert.equal(updates.length, 1, updates.map((u) => u.text.replace(/\s+/g, ' ').slice(0, 60)).join(' | '));
    for (const id of ids) {
      const row = await eventRow(id);
      assert.ok(row.decided_at, 'decided');
      assert.ok((row as unknown as { processed_at: Date | null }).processed_at, 'processed');
    }
    const { rows } = await sql<{ event_id: string }>`
      SELECT event_id FROM webhook_deliveries WHERE team_id = ${s.teamId} ORDER BY event_id`.execute(t.database.db);
    assert.deepEqual(rows.map((r) => r.event_id), [...ids].sort(), 'one delivery per event');
    // A process_events job carrying them (enqueued by an earlier version) finds them processed: one read, nothing written.
    const task = buildTaskList({ db: t.database.db, config: testConfig() }).process_events as (p: unknown, h: unknown) => Promise<void>;
    const jobStatements = await captured(/\b(INSERT|UPDATE|DELETE)\b/i, () => task({ event_ids: ids }, {}));
    assert.deepEqual(jobStatements.map((x) => x.text.replace(/\s+/g, ' ').slice(0, 60)), []);
    const again = await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE team_id = ${s.teamId}`.execute(t.database.db);
    assert.equal(again.rows[0]!.n, 3);
    for (const id of ids) assert.equal(await decisionCount(id), 1);
  });

  test('a job of an earlier version leaves a waiting trigger to the loop: no fan-out, no processed mark, no wait for the batch that holds it', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const hook = await s.a.post('/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.contact.saved'] });
    assert.equal(hook.statusCode, 201, hook.body);
    const [first, carried] = [await trigger(s, 'w1@example.com'), await trigger(s, 'w2@example.com')];
    const task = buildTaskList({ db: t.database.db, config: testConfig() }).process_events as (p: unknown, h: unknown) => Promise<void>;
    // Before any batch: the job does nothing to the waiting trigger (marked processed, it would
    // read as handled while its decisions were still to come).
    await task({ event_ids: [carried] }, {});
    assert.equal((await eventRow(carried)).processed_at, null, 'left to the loop');
    // A batch that takes both events and stops, its transaction open, just before it fans them out.
    let inside!: () => void;
    const reached = new Promise<void>((r) => (inside = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const batch = decideBatch(t.database.db, s.teamId, now, {
      ...opts(),
      processTaken: async (trx, ids) => {
        inside();
        await gate;
        await enqueueDeliveries(trx, ids.map((id) => ({ id })));
      },
    });
    let job: Promise<void> | undefined;
    let finished = false;
    try {
      await Promise.race([reached, batch.then(() => assert.fail('the batch finished without reaching its fan-out'))]);
      job = task({ event_ids: [carried] }, {});
      let timer: NodeJS.Timeout | undefined;
      finished = await Promise.race([
        job.then(() => true, () => true), // its failure is reported below
        new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 5_000))),
      ]);
      clearTimeout(timer);
    } finally {
      release(); // the batch commits (or its failure is reported below), never left holding its transaction
    }
    const settled = await Promise.allSettled([job!, batch]);
    assert.ok(finished, 'the job finished while the batch held its event');
    assert.deepEqual(settled.map((r) => r.status), ['fulfilled', 'fulfilled'], String(settled.map((r) => (r as PromiseRejectedResult).reason)));
    const { rows } = await sql<{ event_id: string }>`
      SELECT event_id FROM webhook_deliveries WHERE team_id = ${s.teamId} ORDER BY event_id`.execute(t.database.db);
    assert.deepEqual(rows.map((r) => r.event_id), [first, carried].sort(), 'one delivery per event, by the batch');
    for (const id of [first, carried]) {
      const row = await eventRow(id);
      assert.ok(row.decided_at && row.processed_at, 'decided and processed');
      assert.equal(await decisionCount(id), 1);
    }
  });

  test('a job marks its events processed while another transaction only references them', async () => {
    const s = await setup(t, sink.port);
    // A webhook and no campaign: the event is recorded decided, with a job for its fan-out.
    const hook = await s.a.post('/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.contact.saved'] });
    assert.equal(hook.statusCode, 201, hook.body);
    const id = await trigger(s, 'ref@example.com');
    assert.equal(((await eventRow(id)) as unknown as { processed_at: Date | null }).processed_at, null);
    const holder = await t.database.pool.connect();
    try {
      // What a foreign-key check of an uncommitted insert that references the event holds.
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM events WHERE id = $1 FOR KEY SHARE', [id]);
      const task = buildTaskList({ db: t.database.db, config: testConfig() }).process_events as (p: unknown, h: unknown) => Promise<void>;
      await task({ event_ids: [id] }, {});
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const row = await eventRow(id);
    assert.ok(row.decided_at, 'decided');
    assert.ok(row.processed_at, 'processed, not skipped as if a decider held it');
  });

  test('a submit is decided in its request and never taken into a batch', async () => {
    const s = await setup(t, sink.port);
    const c1 = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await createCampaign(s.a, { name: 'Other', template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    assert.equal((await s.a.post('/email/contacts/upsert', { email: 'sub@example.com' })).statusCode, 200);
    await drain(t);
    const sub = await s.a.post(`/email/campaigns/${c1.id}/submit`, { email: 'sub@example.com' });
    assert.equal(sub.statusCode, 202, sub.body);
    await trigger(s, 'late@example.com');
    assert.equal(await decideBatch(t.database.db, s.teamId, now, opts()), 'decided');
    assert.equal(await decisionCount(sub.json().event_id), 1, 'the submit keeps its one decision');
  });

  test('one send_email job for several sends: every message sent, counters and progress added up, one email.sent each', async () => {
    const s = await setup(t, sink.port);
    const c1 = await createCampaign(s.a, { name: 'One', template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const c2 = await createCampaign(s.a, { name: 'Two', template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const before = sink.messages.length;
    // Two contacts, two campaigns: four sends decided in one transaction, hence one send_email job.
    await trigger(s, 'm1@example.com');
    await trigger(s, 'm2@example.com');
    const { rows: jobs } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
       WHERE k.identifier = 'send_email'`.execute(t.database.db);
    const sendJobsBefore = jobs[0]!.n;
    assert.equal(await decideBatch(t.database.db, s.teamId, now, opts()), 'decided');
    const { rows: after } = await sql<{ n: number; ids: number }>`
      SELECT count(*)::int AS n, max(json_array_length(j.payload -> 'email_send_log_ids'))::int AS ids
        FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id
       WHERE k.identifier = 'send_email'`.execute(t.database.db);
    assert.equal(after[0]!.n - sendJobsBefore, 1, 'one job for the batch');
    assert.equal(after[0]!.ids, 4);

    await drain(t);
    await sink.waitFor(before + 4);
    const logs = await sendLog(t, s.teamId);
    assert.deepEqual(logs.map((l) => l.status), ['sent', 'sent', 'sent', 'sent']);
    assert.ok(logs.every((l) => l.attempts === 1 && l.sent_at && l.message_id));
    for (const email of ['m1@example.com', 'm2@example.com']) {
      const c = await contactByEmail(t, s.teamId, email);
      assert.equal(c.sent_count, 2, `${email}: one e-mail per campaign`);
    }
    for (const c of [c1, c2]) {
      const row = await t.database.db.selectFrom('campaign_sends').select('send_progress').where('id', '=', c.sendId).executeTakeFirstOrThrow();
      assert.equal((row.send_progress as any).total_sent, 2);
      assert.equal((row.send_progress as any).delivery_rate, 1);
    }
    const sent = await eventsNamed(t, s.teamId, 'email.sent');
    assert.deepEqual(sent.map((e) => e.payload.email_send_log_id).sort(byJson), logs.map((l) => l.id).sort(byJson));
  });

  test('a batch with a hard bounce, a deferral and a send records each by itself', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    for (const email of ['hard-b@example.com', 'soft-b@example.com', 'fine-b@example.com']) await trigger(s, email);
    assert.equal(await decideBatch(t.database.db, s.teamId, now, opts()), 'decided');
    await drain(t, { config: { sendRetryDelays: [3600] } });
    const byEmail = new Map((await sendLog(t, s.teamId)).map((l) => [l.email, l]));
    assert.equal(byEmail.get('hard-b@example.com')!.status, 'bounced_hard');
    assert.equal(byEmail.get('soft-b@example.com')!.status, 'deferred');
    assert.equal(byEmail.get('fine-b@example.com')!.status, 'sent');
    assert.equal((await contactByEmail(t, s.teamId, 'hard-b@example.com')).status, 'bounced');
    assert.equal((await contactByEmail(t, s.teamId, 'soft-b@example.com')).sent_count, 0);
    assert.deepEqual(
      (await Promise.all(['email.sent', 'email.deferred', 'email.bounced.hard'].map((n) => eventsNamed(t, s.teamId, n)))).map((e) => e.length),
      [1, 1, 1],
    );
  });
});
