// Automation sends against a real SMTP server on 127.0.0.1, the clock moved by
// making the next iteration's job due: plain iterations with a contact that
// joins between them, stop and start between iterations, incremental sizes with
// max_iteration_send_amount and max_iterations, the send_amount total, and the
// delivery-rate guard pausing after a burst of hard bounces (550 at RCPT), its
// reason shown, a start letting the send go on. Nobody gets two messages.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { closeTransports } from '../../src/mail/send.ts';
import { iterationSize, runIteration } from '../../src/campaigns/automation.ts';
import { createUser } from '../../src/dashboard/users.ts';
import { PASSWORD, Session } from '../dashboard/session.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { drain, sendLog, setup, type Setup } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';

describe('automation sends', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    t = await buildTestApp();
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  const domain = (s: Setup) => `${s.teamId.slice(-12)}.test`;
  async function contacts(s: Setup, names: string[]): Promise<void> {
    for (const n of names) {
      const r = await s.a.post('/email/contacts/upsert', { email: `${n}@${domain(s)}` });
      assert.equal(r.statusCode, 200, r.body);
    }
    await drain(t);
  }
  async function automation(s: Setup, automationSend: Record<string, unknown>) {
    const res = await s.a.post('/email/campaigns', {
      name: 'Warm-up', campaign_type: 'automation', template_ids: [s.templateId], mail_account_ids: [s.accountId],
      automation_send: { send_interval: 3600, ...automationSend },
    });
    assert.equal(res.statusCode, 201, res.body);
    const c = res.json().campaign;
    return { id: c.id as string, sendId: c.campaign_sends[0].id as string, campaign: c };
  }
  const send = async (s: Setup, id: string) => (await s.a.get(`/email/campaigns/${id}`)).json().campaign.campaign_sends[0];
  const delivered = (s: Setup) => sink.messages.filter((m) => m.to[0]!.endsWith(`@${domain(s)}`)).map((m) => m.to[0]!.split('@')[0]!);
  const attempted = (s: Setup) => sink.rcptAttempts.filter((a) => a.endsWith(`@${domain(s)}`)).map((a) => a.split('@')[0]!);
  /** The next iteration's time has come: its job is made due, and the worker runs until idle. */
  async function nextIteration(sendId: string): Promise<void> {
    await sql`UPDATE campaign_sends SET next_send_at = now() WHERE id = ${sendId}::uuid AND next_send_at > now()`.execute(t.database.db);
    const { rows } = await sql<{ run_at: Date }>`
      UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key = ${`automation-iteration:${sendId}`} RETURNING run_at`.execute(t.database.db);
    assert.equal(rows.length, 1, 'the next iteration is scheduled');
    await drain(t);
  }
  async function signedInAs(s: Setup) {
    const email = `owner-${s.teamId.slice(-8)}@example.com`;
    await createUser(t.database.db, s.teamId, email, PASSWORD);
    const session = new Session(t.app);
    const res = await session.signIn(email);
    assert.equal(res.statusCode, 303);
    return { session };
  }
  const pendingIteration = async (sendId: string) =>
    (await sql<{ later: boolean }>`SELECT run_at > now() + interval '50 minutes' AS later FROM graphile_worker._private_jobs
                                    WHERE key = ${`automation-iteration:${sendId}`}`.execute(t.database.db)).rows[0];

  test('iteration sizes: plain, incremental, capped', () => {
    const a = { send_amount: 0, iteration_send_amount: 3, min_delivery_rate: 0, send_interval: 60, scheduled_send_time: null, is_incremental_send: false, max_iterations: 0, max_iteration_send_amount: 0 };
    assert.deepEqual([1, 2, 5].map((k) => iterationSize(a, k)), [3, 3, 3]);
    assert.deepEqual([1, 2, 5].map((k) => iterationSize({ ...a, is_incremental_send: true }, k)), [3, 6, 15]);
    assert.deepEqual([1, 2, 5].map((k) => iterationSize({ ...a, is_incremental_send: true, max_iteration_send_amount: 7 }, k)), [3, 6, 7]);
  });

  test('plain iterations an interval apart; a contact added meanwhile joins; stop holds an iteration, start goes on; nobody twice', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7']);
    const auto = await automation(s, { iteration_send_amount: 3 });
    assert.equal(auto.campaign.campaign_type, 'automation');
    assert.equal(auto.campaign.delivery_type, 'automation');
    await drain(t);
    assert.deepEqual(delivered(s).sort(), ['a1', 'a2', 'a3']);
    let progress = await send(s, auto.id);
    assert.equal(progress.status, 'sending');
    assert.equal(progress.send_progress.current_iteration, 1);
    assert.ok((await pendingIteration(auto.sendId))?.later, 'iteration 2 waits an interval');
    // Nothing more before its time.
    await drain(t);
    assert.equal(delivered(s).length, 3);

    await contacts(s, ['a8']);
    await nextIteration(auto.sendId);
    assert.deepEqual(delivered(s).sort(), ['a1', 'a2', 'a3', 'a4', 'a5', 'a6']);

    // Stopped: the due iteration sends nothing; started: it goes on.
    assert.equal((await s.a.post(`/email/campaigns/${auto.id}/stop`)).statusCode, 200);
    await nextIteration(auto.sendId);
    assert.equal(delivered(s).length, 6);
    assert.equal((await send(s, auto.id)).status, 'paused');
    assert.equal((await s.a.post(`/email/campaigns/${auto.id}/start`)).statusCode, 200);
    await drain(t);
    // Iteration 3: a7 and a8 (who joined after iteration 1), then nobody is left: completed.
    assert.deepEqual(delivered(s).sort(), ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8']);
    progress = await send(s, auto.id);
    assert.equal(progress.status, 'completed');
    assert.equal(progress.send_progress.current_iteration, 3);
    assert.equal(progress.send_progress.total_recipients, 8);
    assert.equal(progress.send_progress.list_complete, true);
    const log = await sendLog(t, s.teamId);
    assert.equal(log.length, 8);
    assert.equal(new Set(log.map((l) => l.contact_id)).size, 8);
  });

  test('incremental sizes capped by max_iteration_send_amount, ended by max_iterations; send_amount ends a plain one', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, Array.from({ length: 20 }, (_, i) => `b${String(i).padStart(2, '0')}`));
    // 2, 4, then 5 (capped): 11 over 3 iterations, the 4th never runs.
    const inc = await automation(s, { iteration_send_amount: 2, is_incremental_send: true, max_iteration_send_amount: 5, max_iterations: 3 });
    await drain(t);
    assert.equal(delivered(s).length, 2);
    await nextIteration(inc.sendId);
    assert.equal(delivered(s).length, 6);
    await nextIteration(inc.sendId);
    assert.equal(delivered(s).length, 11);
    const p = await send(s, inc.id);
    assert.equal(p.status, 'completed');
    assert.equal(p.send_progress.current_iteration, 3);
    assert.equal(await pendingIteration(inc.sendId), undefined, 'no 4th iteration');

    // A plain one with send_amount 5 on another team: 2, 2, 1.
    const s2 = await setup(t, sink.port);
    await contacts(s2, Array.from({ length: 9 }, (_, i) => `c${i}`));
    const capped = await automation(s2, { iteration_send_amount: 2, send_amount: 5 });
    await drain(t);
    await nextIteration(capped.sendId);
    await nextIteration(capped.sendId);
    assert.equal(delivered(s2).length, 5);
    assert.equal((await send(s2, capped.id)).status, 'completed');
    assert.equal(new Set(delivered(s2)).size, 5);
  });

  test('the delivery-rate guard pauses after a burst of hard bounces, shows why, and a start goes on past it', async () => {
    const s = await setup(t, sink.port);
    // Listed in creation order: three addresses the server refuses (550), then good ones.
    await contacts(s, ['hard1', 'hard2', 'hard3', 'g1', 'g2', 'g3', 'g4', 'g5', 'g6', 'g7', 'g8']);
    const auto = await automation(s, { iteration_send_amount: 4, min_delivery_rate: 50 });
    await drain(t);
    assert.deepEqual(attempted(s).sort(), ['g1', 'hard1', 'hard2', 'hard3']);
    assert.deepEqual(delivered(s), ['g1']);
    // Iteration 1: 4 handed to the relay, 3 bounced: 25 % < 50 %.
    await nextIteration(auto.sendId);
    let p = await send(s, auto.id);
    assert.equal(p.status, 'paused');
    assert.equal(p.send_progress.pause_reason, 'delivery_rate');
    assert.equal(p.send_progress.sent, 4);
    assert.equal(p.send_progress.bounced, 3);
    assert.deepEqual(delivered(s), ['g1'], 'nothing sent after the pause');
    const skipped = await sql<{ n: number }>`SELECT count(*)::int AS n FROM campaign_decisions WHERE campaign_send_id = ${auto.sendId}`.execute(t.database.db);
    assert.equal(skipped.rows[0]!.n, 4, 'the paused iteration listed nobody');

    // Start: the reason is cleared and iteration 2 goes past the guard once.
    assert.equal((await s.a.post(`/email/campaigns/${auto.id}/start`)).statusCode, 200);
    p = await send(s, auto.id);
    assert.equal(p.send_progress.pause_reason, null);
    await drain(t);
    assert.deepEqual(delivered(s).sort(), ['g1', 'g2', 'g3', 'g4', 'g5']);
    // Before iteration 3 the guard looks again: 8 sent, 3 bounced = 62.5 % >= 50 %: it goes on.
    await nextIteration(auto.sendId);
    assert.deepEqual(delivered(s).sort(), ['g1', 'g2', 'g3', 'g4', 'g5', 'g6', 'g7', 'g8']);
    p = await send(s, auto.id);
    assert.equal(p.status, 'completed');
    assert.equal(p.send_progress.pause_reason, null);
  });

  test('an iteration larger than a list batch is written over several jobs and resumes after a crash, listing nobody twice', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, ['d1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7']);
    const auto = await automation(s, { iteration_send_amount: 5, scheduled_send_time: new Date(Date.now() + 3_600_000).toISOString() });
    // Its start time has come (the job itself is left waiting: this test runs the steps by hand).
    await sql`UPDATE campaign_sends SET status = 'sending', next_send_at = now() WHERE id = ${auto.sendId}`.execute(t.database.db);
    const state = async () => (await sql<{ current_iteration: number; iteration_listed: number; total_recipients: number }>`
      SELECT current_iteration, iteration_listed, total_recipients FROM campaign_sends WHERE id = ${auto.sendId}`.execute(t.database.db)).rows[0]!;
    // Each step is one transaction: its entries and the iteration's count commit together, so a step
    // that runs again (a duplicate job, a retry after a crash) goes on from the committed count.
    await runIteration(t.database.db, auto.sendId, undefined, 2);
    assert.deepEqual(await state(), { current_iteration: 0, iteration_listed: 2, total_recipients: 2 });
    await runIteration(t.database.db, auto.sendId, undefined, 2);
    assert.deepEqual(await state(), { current_iteration: 0, iteration_listed: 4, total_recipients: 4 });
    await runIteration(t.database.db, auto.sendId, undefined, 2);
    assert.deepEqual(await state(), { current_iteration: 1, iteration_listed: 0, total_recipients: 5 });
    // A stray run now: iteration 2 is not due (its job waits an interval), so it lists nothing.
    await runIteration(t.database.db, auto.sendId, undefined, 2);
    assert.deepEqual(await state(), { current_iteration: 1, iteration_listed: 0, total_recipients: 5 });
    const log = await sendLog(t, s.teamId);
    assert.equal(new Set(log.map((l) => l.contact_id)).size, log.length, 'nobody listed twice');
  });

  test('stop holds an iteration\'s queued messages (claimed nowhere), start sends them; a message waiting for the next day keeps the low priority', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, ['f1', 'f2', 'f3']);
    const auto = await automation(s, { iteration_send_amount: 3, scheduled_send_time: new Date(Date.now() + 3_600_000).toISOString() });
    await sql`UPDATE campaign_sends SET status = 'sending', next_send_at = now() WHERE id = ${auto.sendId}`.execute(t.database.db);
    await runIteration(t.database.db, auto.sendId, undefined);
    assert.equal((await sendLog(t, s.teamId)).length, 3, 'iteration 1 listed, its send jobs queued');
    assert.equal((await s.a.post(`/email/campaigns/${auto.id}/stop`)).statusCode, 200);
    await drain(t);
    assert.equal(delivered(s).length, 0, 'nothing sent while stopped');
    assert.ok((await sendLog(t, s.teamId)).every((l) => l.status === 'queued'));
    assert.equal((await s.a.post(`/email/campaigns/${auto.id}/start`)).statusCode, 200);
    await drain(t);
    assert.deepEqual(delivered(s).sort(), ['f1', 'f2', 'f3']);

    // Over the account's campaign share of its daily limit: the rest waits for the next UTC day, at the +1 priority.
    const s2 = await setup(t, sink.port);
    await sql`UPDATE mail_accounts SET daily_limit = 2, campaign_share_percent = 100 WHERE id = ${s2.accountId}`.execute(t.database.db);
    await contacts(s2, ['h1', 'h2', 'h3', 'h4']);
    const limited = await automation(s2, { iteration_send_amount: 4 });
    await drain(t);
    assert.equal(delivered(s2).length, 2);
    const waiting = await sql<{ priority: number; tomorrow: boolean }>`
      SELECT j.priority, j.run_at = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day' AS tomorrow
        FROM graphile_worker._private_jobs j JOIN email_send_log l ON j.key = 'send-next-day:' || l.id
       WHERE l.campaign_send_id = ${limited.sendId}`.execute(t.database.db);
    assert.deepEqual(waiting.rows, [{ priority: 1, tomorrow: true }, { priority: 1, tomorrow: true }]);
    assert.equal((await send(s2, limited.id)).send_progress.remaining, 2);
  });

  test('the dashboard shows the guard\'s pause and the progress', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, ['hard9', 'e1']);
    const auto = await automation(s, { iteration_send_amount: 1, min_delivery_rate: 90 });
    await drain(t);
    await nextIteration(auto.sendId);
    assert.equal((await send(s, auto.id)).send_progress.pause_reason, 'delivery_rate');
    const { session } = await signedInAs(s);
    const page = await session.get(`/campaigns/${auto.id}`);
    assert.equal(page.statusCode, 200);
    assert.match(page.body, /Paused by the delivery-rate guard/);
    assert.match(page.body, /id="send-progress">1 sent · 1 bounced · 0 waiting · iteration 1/);
  });

  test('validation: automation_send is required and only for automation; events are refused; PATCH only while scheduled', async () => {
    const s = await setup(t, sink.port);
    const base = { name: 'X', template_ids: [s.templateId], mail_account_ids: [s.accountId] };
    const bad = async (body: Record<string, unknown>, field: string) => {
      const r = await s.a.post('/email/campaigns', { ...base, ...body });
      assert.equal(r.statusCode, 422, r.body);
      assert.ok(r.json().error.details.some((d: { field: string }) => d.field.startsWith(field)), r.body);
    };
    await bad({ campaign_type: 'automation' }, 'automation_send');
    await bad({ campaign_type: 'automation', automation_send: { iteration_send_amount: 0, send_interval: 60 } }, 'automation_send');
    await bad({ campaign_type: 'automation', automation_send: { iteration_send_amount: 5 } }, 'automation_send');
    await bad({ campaign_type: 'automation', events: ['lead.created'], automation_send: { iteration_send_amount: 5, send_interval: 60 } }, 'events');
    await bad({ events: ['lead.created'], automation_send: { iteration_send_amount: 5, send_interval: 60 } }, 'automation_send');
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const auto = await automation(s, { iteration_send_amount: 5, scheduled_send_time: later });
    assert.equal(auto.campaign.campaign_sends[0].status, 'scheduled');
    const patch = (payload: unknown) => t.app.inject({ method: 'PATCH', url: `/public/v1/email/campaigns/${auto.id}`, headers: { 'x-api-key': s.key }, payload: payload as object });
    const patched = await patch({ automation_send: { iteration_send_amount: 9, send_interval: 120, scheduled_send_time: later } });
    assert.equal(patched.statusCode, 200, patched.body);
    assert.equal(patched.json().campaign.campaign_sends[0].send_data.automation_send.iteration_send_amount, 9);
    await sql`UPDATE campaign_sends SET status = 'sending' WHERE id = ${auto.sendId}`.execute(t.database.db);
    assert.equal((await patch({ automation_send: { iteration_send_amount: 2, send_interval: 60 } })).statusCode, 409);
  });
});
