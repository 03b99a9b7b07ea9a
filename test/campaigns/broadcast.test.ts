// Broadcasts end to end against the capturing SMTP sink on 127.0.0.1: the
// scheduled start, the send_amount cap, a segment of tags and custom fields,
// pause/resume, an unsubscribe mid-send, cancel, and a list batch run twice.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { closeTransports } from '../../src/mail/send.ts';
import { buildBroadcastBatch } from '../../src/campaigns/broadcast.ts';
import { checkSegmentRules, matchesSegment, segmentSql } from '../../src/campaigns/segment.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { drain, sendLog, setup, type Setup } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';

describe('broadcast campaigns', () => {
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

  async function contacts(s: Setup, n: number, extra: (i: number) => Record<string, unknown> = () => ({})): Promise<void> {
    for (let i = 0; i < n; i++) {
      const r = await s.a.post('/email/contacts/upsert', { email: `r${i}@${s.teamId.slice(-12)}.test`, ...extra(i) });
      assert.equal(r.statusCode, 200, r.body);
    }
    await drain(t); // contact.saved events: no campaign triggers on them
  }

  async function broadcast(s: Setup, body: Record<string, unknown> = {}) {
    const res = await s.a.post('/email/campaigns', {
      name: 'News', campaign_type: 'broadcast', template_ids: [s.templateId], mail_account_ids: [s.accountId], ...body,
    });
    assert.equal(res.statusCode, 201, res.body);
    const c = res.json().campaign;
    return { id: c.id as string, sendId: c.campaign_sends[0].id as string, campaign: c };
  }

  const get = async (s: Setup, id: string) => (await s.a.get(`/email/campaigns/${id}`)).json().campaign.campaign_sends[0];
  const delivered = (s: Setup) => sink.messages.filter((m) => m.to[0]!.endsWith(`@${s.teamId.slice(-12)}.test`)).map((m) => m.to[0]!);

  test('a scheduled broadcast waits for its time, then sends once to every active contact, and completes', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, 4);
    const at = new Date(Date.now() + 1500).toISOString();
    const b = await broadcast(s, { broadcast_send: { scheduled_send_time: at } });
    assert.equal(b.campaign.campaign_type, 'broadcast');
    assert.equal(b.campaign.delivery_type, 'broadcast');
    assert.equal(b.campaign.campaign_sends[0].status, 'scheduled');
    await drain(t);
    assert.equal(delivered(s).length, 0, 'nothing before the scheduled time');
    assert.equal((await sendLog(t, s.teamId)).length, 0);
    await new Promise((r) => setTimeout(r, 1700));
    await drain(t);
    assert.deepEqual(delivered(s).sort(), [0, 1, 2, 3].map((i) => `r${i}@${s.teamId.slice(-12)}.test`).sort());
    // Completed by the job that recorded the last result: no finish job is left to run.
    const send = await get(s, b.id);
    assert.equal(send.status, 'completed');
    const finishJobs = await sql<{ n: number }>`SELECT count(*)::int AS n FROM graphile_worker._private_jobs j
      JOIN graphile_worker._private_tasks k ON k.id = j.task_id WHERE k.identifier = 'broadcast_finish'`.execute(t.database.db);
    assert.equal(finishJobs.rows[0]!.n, 0, 'no polling job');
    assert.equal(send.send_progress.total_recipients, 4);
    assert.equal(send.send_progress.sent, 4);
    assert.equal(send.send_progress.remaining, 0);
    // 4 attempted within the last 5 minutes: 0.8 a minute; nothing left, so no ETA.
    assert.equal(send.send_progress.rate_per_minute, 0.8);
    assert.equal(send.send_progress.eta, null);
    const decisions = await t.database.db.selectFrom('campaign_decisions').selectAll().where('campaign_send_id', '=', b.sendId).execute();
    assert.equal(decisions.length, 4);
    assert.ok(decisions.every((d) => d.event_id === null && d.decision === 'send' && d.email_send_log_id));
  });

  test('send_amount caps the recipients; a segment of tags and custom fields selects them; suppressed get a skip reason', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, 8, (i) => ({ tags: i % 2 === 0 ? ['vip'] : [], custom_int_1: i }));
    await sql`INSERT INTO suppressions (team_id, email, reason) VALUES (${s.teamId}, ${`r2@${s.teamId.slice(-12)}.test`}, 'manual')
              ON CONFLICT DO NOTHING`.execute(t.database.db);
    // vip (0, 2, 4, 6) with custom_int_1 > 1 → 2, 4, 6; 2 suppressed → 4, 6
    const b = await broadcast(s, {
      segment_query: { rules: [{ field: 'tags', operator: 'has_tag', value: 'vip' }, { field: 'custom_int_1', operator: 'greater_than', value: 1 }] },
    });
    await drain(t);
    const got = delivered(s).sort();
    assert.ok(got.includes(`r4@${s.teamId.slice(-12)}.test`));
    assert.ok(!got.includes(`r2@${s.teamId.slice(-12)}.test`));
    assert.ok(got.every((e) => /r[46]@/.test(e)), got.join());
    const skips = await t.database.db.selectFrom('campaign_decisions').selectAll().where('campaign_send_id', '=', b.sendId).where('decision', '=', 'skip').execute();
    assert.equal(skips.length, 1);
    assert.equal(skips[0]!.reason, 'suppressed');
    // The same decisions through the API, filtered by send, decision and reason, newest first, paged as every list.
    const all = await s.a.get(`/email/campaigns/${b.id}/decisions?send_id=${b.sendId}`);
    assert.equal(all.statusCode, 200, all.body);
    assert.deepEqual(all.json().decisions.map((d: { email: string; decision: string }) => `${d.email.split('@')[0]}:${d.decision}`).sort(), ['r2:skip', 'r4:send', 'r6:send']);
    assert.deepEqual(all.json().meta, { current_page: '1', per_page: 20, total: '3', last_page: '1' });
    const sent = all.json().decisions.filter((d: { decision: string }) => d.decision === 'send');
    assert.ok(sent.every((d: { email_send_log_id: string; send_status: string; event_id: null }) => d.email_send_log_id && d.send_status === 'sent' && d.event_id === null));
    const onlySkips = (await s.a.get(`/email/campaigns/${b.id}/decisions?decision=skip&reason=suppressed`)).json();
    assert.deepEqual(onlySkips.decisions.map((d: { email: string; reason: string }) => [d.email.split('@')[0], d.reason]), [['r2', 'suppressed']]);
    assert.equal((await s.a.get(`/email/campaigns/${b.id}/decisions?reason=cooldown`)).json().meta.total, '0');
    const paged = (await s.a.get(`/email/campaigns/${b.id}/decisions?per_page=2&page=2`)).json();
    assert.equal(paged.decisions.length, 1);
    assert.equal((await s.a.get(`/email/campaigns/${b.id}/decisions?reason=nonsense`)).statusCode, 422);
    assert.equal((await s.a.get(`/email/campaigns/${b.id}/decisions?send_id=nope`)).statusCode, 422);

    const s2 = await setup(t, sink.port);
    await contacts(s2, 6);
    const b2 = await broadcast(s2, { broadcast_send: { send_amount: 4 } });
    await drain(t);
    assert.equal(delivered(s2).length, 4);
    assert.equal((await get(s2, b2.id)).send_progress.total_recipients, 4);
  });

  test('a list batch that runs again lists nobody twice and skips nobody; pause holds, start resumes; unsubscribe mid-send; cancel', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, 7);
    const b = await broadcast(s, { broadcast_send: { scheduled_send_time: new Date(Date.now() + 3_600_000).toISOString() } });
    // Batches of 3, each run twice as a crash between commit and job completion would: 7 listed, once each.
    await sql`UPDATE campaign_sends SET status = 'sending' WHERE id = ${b.sendId}`.execute(t.database.db);
    for (let i = 0; i < 3; i++) {
      await buildBroadcastBatch(t.database.db, b.sendId, undefined, 3);
      await sql`UPDATE campaign_sends SET list_cursor = NULL WHERE id = ${b.sendId} AND ${i} = 1`.execute(t.database.db); // a lost cursor: the unique entries hold
      await buildBroadcastBatch(t.database.db, b.sendId, undefined, 3);
    }
    const log = await sendLog(t, s.teamId);
    assert.equal(log.length, 7);
    assert.equal(new Set(log.map((l) => l.contact_id)).size, 7);

    // Pause before any send job runs: nothing goes out, all stay queued.
    assert.equal((await s.a.post(`/email/campaigns/${b.id}/stop`)).statusCode, 200);
    await drain(t);
    assert.equal(delivered(s).length, 0);
    assert.ok((await sendLog(t, s.teamId)).every((l) => l.status === 'queued'));
    // r0 unsubscribes while paused: gets nothing.
    await sql`UPDATE contacts SET status = 'unsubscribed' WHERE team_id = ${s.teamId} AND email = ${`r0@${s.teamId.slice(-12)}.test`}`.execute(t.database.db);
    assert.equal((await s.a.post(`/email/campaigns/${b.id}/start`)).statusCode, 200);
    await drain(t);
    const got = delivered(s);
    assert.equal(got.length, 6);
    assert.equal(new Set(got).size, 6);
    assert.ok(!got.includes(`r0@${s.teamId.slice(-12)}.test`));
    const r0 = (await sendLog(t, s.teamId)).find((l) => l.email.startsWith('r0@'))!;
    assert.equal(r0.status, 'cancelled');
    assert.match(r0.last_error ?? '', /unsubscribed/);
    // The last send job completed the send (its last message ended, sent or cancelled).
    assert.equal((await get(s, b.id)).status, 'completed');

    // Cancel: queued messages of another broadcast become cancelled and are never sent.
    const s2 = await setup(t, sink.port);
    await contacts(s2, 3);
    const c = await broadcast(s2);
    await buildBroadcastBatch(t.database.db, c.sendId, undefined);
    const res = await s2.a.post(`/email/campaigns/${c.id}/cancel`);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().cancelled, 3);
    assert.equal(res.json().campaign.campaign_sends[0].status, 'cancelled');
    await drain(t);
    assert.equal(delivered(s2).length, 0);
    assert.equal((await s2.a.post(`/email/campaigns/${c.id}/cancel`)).statusCode, 409);
    assert.equal((await s2.a.post(`/email/campaigns/${c.id}/start`)).statusCode, 409);
    assert.equal((await s2.a.post(`/email/campaigns/${c.id}/submit`, { email: `r1@${s2.teamId.slice(-12)}.test` })).statusCode, 409);
    // Another team's broadcast is 404.
    assert.equal((await s.a.post(`/email/campaigns/${c.id}/cancel`)).statusCode, 404);
  });

  test('completion without polling: a list of skips only completes when built; messages ended while paused complete it on resume', async () => {
    // Every recipient suppressed: no message, the list's last batch completes the send.
    const s = await setup(t, sink.port);
    await contacts(s, 2);
    await sql`INSERT INTO suppressions (team_id, email, reason)
              SELECT ${s.teamId}, email, 'manual' FROM contacts WHERE team_id = ${s.teamId} ON CONFLICT DO NOTHING`.execute(t.database.db);
    const b = await broadcast(s);
    await drain(t);
    assert.equal((await get(s, b.id)).status, 'completed');
    assert.equal((await sendLog(t, s.teamId)).length, 0);

    // Paused after listing; its messages end while it is paused (here: failed by hand, as a lease expiry would);
    // start finds nothing left to send and completes at once.
    const s2 = await setup(t, sink.port);
    await contacts(s2, 2);
    const c = await broadcast(s2, { broadcast_send: { scheduled_send_time: new Date(Date.now() + 3_600_000).toISOString() } });
    await sql`UPDATE campaign_sends SET status = 'sending' WHERE id = ${c.sendId}`.execute(t.database.db);
    await buildBroadcastBatch(t.database.db, c.sendId, undefined);
    assert.equal((await get(s2, c.id)).status, 'sending', 'messages are queued: not complete');
    assert.equal((await s2.a.post(`/email/campaigns/${c.id}/stop`)).statusCode, 200);
    await sql`UPDATE email_send_log SET status = 'failed', last_error = 'interrupted' WHERE campaign_send_id = ${c.sendId}`.execute(t.database.db);
    assert.equal((await get(s2, c.id)).status, 'paused');
    assert.equal((await s2.a.post(`/email/campaigns/${c.id}/start`)).statusCode, 200);
    assert.equal((await get(s2, c.id)).status, 'completed');
    assert.equal(delivered(s2).length, 0);
  });

  test('at the campaign share of the daily limit the rest waits, queued, for the next UTC day at the broadcast priority; not completed', async () => {
    const s = await setup(t, sink.port);
    // 10 a day, campaigns 90 %: 9 today.
    await sql`UPDATE mail_accounts SET daily_limit = 10, campaign_share_percent = 90 WHERE id = ${s.accountId}`.execute(t.database.db);
    await contacts(s, 12);
    const b = await broadcast(s);
    await drain(t);
    assert.equal(delivered(s).length, 9);
    const log = await sendLog(t, s.teamId);
    assert.equal(log.filter((l) => l.status === 'queued').length, 3);
    const waiting = await sql<{ priority: number; tomorrow: boolean }>`
      SELECT j.priority, j.run_at = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day' AS tomorrow
        FROM graphile_worker._private_jobs j JOIN email_send_log l ON j.key = 'send-next-day:' || l.id
       WHERE l.campaign_send_id = ${b.sendId}`.execute(t.database.db);
    assert.equal(waiting.rows.length, 3);
    assert.ok(waiting.rows.every((r) => r.priority === 1 && r.tomorrow), JSON.stringify(waiting.rows));
    const p = await get(s, b.id);
    assert.equal(p.status, 'sending', 'not completed while messages wait');
    assert.equal(p.send_progress.remaining, 3);
    // The next day comes: the waiting jobs run and the send completes.
    await sql`DELETE FROM mail_account_usage WHERE mail_account_id = ${s.accountId}`.execute(t.database.db);
    await sql`UPDATE graphile_worker._private_jobs SET run_at = now() WHERE key LIKE 'send-next-day:%'`.execute(t.database.db);
    await drain(t);
    assert.equal(delivered(s).length, 12);
    assert.equal((await get(s, b.id)).status, 'completed');
  });

  test("an account's max_per_minute holds the rest back, queued, for the next minute", async () => {
    const s = await setup(t, sink.port);
    const patched = await t.app.inject({
      method: 'PATCH', url: `/public/v1/email/mail-accounts/${s.accountId}`, headers: { 'x-api-key': s.key }, payload: { max_per_minute: 2 },
    });
    assert.equal(patched.statusCode, 200, patched.body);
    assert.equal(patched.json().mail_account.max_per_minute, 2);
    await contacts(s, 5);
    const b = await broadcast(s);
    await drain(t);
    // The minute may turn during the run: at most 2 a minute, so 2 or 4.
    const sent = delivered(s).length;
    assert.ok(sent === 2 || sent === 4, `sent ${sent}`);
    const log = await sendLog(t, s.teamId);
    assert.equal(log.filter((l) => l.status === 'queued').length, 5 - sent);
    const { rows } = await sql<{ n: number; priorities: number[] }>`
      SELECT count(*)::int AS n, array_agg(DISTINCT priority) AS priorities FROM graphile_worker._private_jobs
       WHERE key LIKE 'send-next-minute:%' AND run_at > now()`.execute(t.database.db);
    assert.ok(rows[0]!.n >= 5 - sent);
    assert.deepEqual(rows[0]!.priorities, [1], 'a waiting broadcast message keeps the broadcast priority');
    const progress = (await get(s, b.id)).send_progress;
    assert.equal(progress.remaining, 5 - sent);
    // The pace of the last 5 minutes, and the time the rest should take at it: remaining ÷ rate minutes from now.
    assert.equal(progress.rate_per_minute, sent / 5);
    const minutes = (Date.parse(progress.eta) - Date.now()) / 60_000;
    const want = (5 - sent) / (sent / 5);
    assert.ok(Math.abs(minutes - want) < 0.2, `eta in ${minutes.toFixed(2)} min, want ${want}`);
  });

  test('the segment compiled to SQL selects exactly the contacts matchesSegment selects', async () => {
    const s = await setup(t, sink.port);
    await contacts(s, 12, (i) => ({
      first_name: i % 3 === 0 ? 'Ada' : i % 3 === 1 ? 'ADAM' : null, tags: i % 2 ? ['vip', 'x'] : ['x'],
      custom_int_1: i, custom_bool_1: i % 4 === 0, custom_dec_1: i / 2, country_code: i < 6 ? 'gb' : 'de',
      custom_datetime_1: new Date(Date.UTC(2026, 0, 1 + i)).toISOString(),
    }));
    const ruleSets: unknown[][] = [
      [],
      [{ field: 'tags', operator: 'has_tag', value: 'vip' }],
      [{ field: 'tags', operator: 'not_has_tag', value: 'vip' }, { field: 'custom_int_1', operator: 'less_than', value: 7 }],
      [{ field: 'first_name', operator: 'equals', value: 'ada' }],
      [{ field: 'first_name', operator: 'contains', value: 'ad' }],
      [{ field: 'first_name', operator: 'not_contains', value: 'm' }],
      [{ field: 'first_name', operator: 'is_not_set' }],
      [{ field: 'first_name', operator: 'not_equals', value: 'Ada' }],
      [{ any: [{ field: 'custom_bool_1', operator: 'equals', value: true }, { field: 'custom_dec_1', operator: 'greater_than', value: 4.5 }] }],
      [{ field: 'custom_datetime_1', operator: 'greater_than', value: '2026-01-05T00:00:00Z' }, { field: 'country_code', op: 'eq', value: 'GB' }],
      [{ all: [{ field: 'custom_int_1', operator: 'equals', value: 3 }] }],
    ];
    const all = await t.database.db.selectFrom('contacts').selectAll().where('team_id', '=', s.teamId).execute();
    for (const rules of ruleSets) {
      const cond = segmentSql(rules);
      assert.ok(cond, JSON.stringify(rules));
      const { rows } = await sql<{ id: string }>`SELECT id FROM contacts WHERE team_id = ${s.teamId} AND ${cond} ORDER BY id`.execute(t.database.db);
      const js = all.filter((c) => matchesSegment(c as Record<string, unknown>, rules)).map((c) => c.id).sort();
      assert.deepEqual(rows.map((r) => r.id).sort(), js, JSON.stringify(rules));
      assert.ok(js.length < all.length || rules.length === 0, `${JSON.stringify(rules)} should leave someone out`);
    }
    // A form the compiler does not take: null, so rows are tested one by one.
    assert.equal(segmentSql([{ field: 'first_name', operator: 'equals', value: 5 }]), null);
    // A date-time Date.parse reads but PostgreSQL cannot hold (before 4713 BC) is never sent to it:
    // refused in an ordered rule, tested row by row in an equality (no contact has it).
    const ancient = '-100000-01-01T00:00:00Z';
    assert.equal(segmentSql([{ field: 'created_at', operator: 'equals', value: ancient }]), null);
    assert.deepEqual(checkSegmentRules([{ field: 'created_at', operator: 'greater_than', value: ancient }]).map((d) => d.field), ['segment_query.rules[0].value']);
    assert.deepEqual(checkSegmentRules([{ field: 'created_at', operator: 'greater_than', value: '-004712-01-01T00:00:00Z' }]), []);
  });

  test('events are required for event-triggered campaigns only; PATCH moves the schedule while scheduled', async () => {
    const s = await setup(t, sink.port);
    const bad = await s.a.post('/email/campaigns', { name: 'x', template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    assert.equal(bad.statusCode, 422, bad.body);
    const b = await broadcast(s, { broadcast_send: { scheduled_send_time: new Date(Date.now() + 3_600_000).toISOString() } });
    const later = new Date(Date.now() + 7_200_000).toISOString();
    const patched = await t.app.inject({
      method: 'PATCH', url: `/public/v1/email/campaigns/${b.id}`, headers: { 'x-api-key': s.key },
      payload: { broadcast_send: { scheduled_send_time: later, send_amount: 10 } },
    });
    assert.equal(patched.statusCode, 200, patched.body);
    const sd = patched.json().campaign.campaign_sends[0].send_data.broadcast_send;
    assert.equal(sd.scheduled_send_time, later);
    assert.equal(sd.send_amount, 10);
    const { rows } = await sql<{ n: number; run_at: Date }>`
      SELECT count(*)::int AS n, max(run_at) AS run_at FROM graphile_worker._private_jobs WHERE key = ${`broadcast-build:${b.sendId}`}`.execute(t.database.db);
    assert.equal(rows[0]!.n, 1);
    assert.equal(new Date(rows[0]!.run_at).toISOString(), later);
  });

  test('a schedule at a leap second is the next second, an hours-only offset reads; one past UTC year 9999 is 422, at create and by PATCH', async () => {
    const s = await setup(t, sink.port);
    // A leap second reads as the next second (the API's date-time rule); it made toISOString throw (500).
    const b = await broadcast(s, { broadcast_send: { scheduled_send_time: '2030-12-31T23:59:60Z' } });
    const view = async () => (await s.a.get(`/email/campaigns/${b.id}`)).json().campaign.campaign_sends[0];
    assert.equal((await view()).send_data.broadcast_send.scheduled_send_time, '2031-01-01T00:00:00.000Z');
    assert.equal((await view()).next_send_at, '2031-01-01T00:00:00.000Z');
    const patch = (at: string) => t.app.inject({
      method: 'PATCH', url: `/public/v1/email/campaigns/${b.id}`, headers: { 'x-api-key': s.key },
      payload: { broadcast_send: { scheduled_send_time: at } },
    });
    // An offset of hours alone is a valid date-time too; Date.parse read it as NaN (a 500).
    const hours = await patch('2033-03-01T10:00:00+01');
    assert.equal(hours.statusCode, 200, hours.body);
    assert.equal(hours.json().campaign.campaign_sends[0].next_send_at, '2033-03-01T09:00:00.000Z');
    const leap = await patch('2032-06-30T23:59:60Z');
    assert.equal(leap.statusCode, 200, leap.body);
    assert.equal(leap.json().campaign.campaign_sends[0].next_send_at, '2032-07-01T00:00:00.000Z');
    // Valid date-time text whose UTC time is in year 10000: the answers' date-time format cannot
    // carry it (the PATCH was a 500, and so was a create); refused, and nothing changes.
    const far = '9999-12-31T23:59:59-15:59';
    const refused = await patch(far);
    assert.equal(refused.statusCode, 422, refused.body);
    assert.deepEqual(refused.json().error.details.map((d: { field: string }) => d.field), ['broadcast_send.scheduled_send_time']);
    assert.equal((await view()).next_send_at, '2032-07-01T00:00:00.000Z');
    const created = await s.a.post('/email/campaigns', {
      name: 'Far', campaign_type: 'broadcast', template_ids: [s.templateId], mail_account_ids: [s.accountId], broadcast_send: { scheduled_send_time: far },
    });
    assert.equal(created.statusCode, 422, created.body);
    const auto = await s.a.post('/email/campaigns', {
      name: 'Far', campaign_type: 'automation', template_ids: [s.templateId], mail_account_ids: [s.accountId],
      automation_send: { iteration_send_amount: 1, send_interval: 60, scheduled_send_time: far },
    });
    assert.equal(auto.statusCode, 422, auto.body);
    assert.deepEqual(auto.json().error.details.map((d: { field: string }) => d.field), ['automation_send.scheduled_send_time']);
  });
});
