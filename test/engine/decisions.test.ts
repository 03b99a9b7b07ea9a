import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { decideBatch } from '../../src/campaigns/engine.ts';
import { decideOptions } from '../../src/tasks.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { byJson } from '../lib/order.ts';
import { createCampaign, createTemplate, drain, insertAccount, sendLog, setup, type Setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';
import { captured } from '../lib/statements.ts';
import { indexesOf, planNodes } from '../lib/plans.ts';


describe('campaign decisions', () => {
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

  /** Ingests contact.saved for the address and returns the event id. */
  async function trigger(s: Setup, email: string, name = 'contact.saved', payload?: object): Promise<string> {
    const res = await s.a.post('/email/events', { event_name: name, email, ...(payload ? { payload } : {}) });
    assert.equal(res.statusCode, 202, res.body);
    return res.json().event_id;
  }

  async function decisions(s: Setup, eventId: string): Promise<[string, string, string | null][]> {
    const res = await s.a.get(`/email/events/${eventId}/decisions`);
    assert.equal(res.statusCode, 200, res.body);
    return res.json().decisions.map((d: any) => [d.campaign_id, d.decision, d.reason]);
  }

  const base = (s: Setup, extra: object = {}) => ({ template_ids: [s.templateId], mail_account_ids: [s.accountId], ...extra });

  test('every matching campaign gets one decision; disabled, other-trigger and other-team campaigns get none', async () => {
    const s = await setup(t, sink.port);
    const other = await setup(t, sink.port);
    const on = await createCampaign(s.a, base(s));
    await createCampaign(s.a, base(s, { event_triggered_send: { enabled: false } }));
    await createCampaign(s.a, base(s, { events: ['lead.created'] }));
    await createCampaign(other.a, base(other));
    const paused = await createCampaign(s.a, base(s));
    assert.equal((await s.a.post(`/email/campaigns/${paused.id}/stop`)).statusCode, 200);
    const ev = await trigger(s, 'one@example.com');
    await drain(t);
    assert.deepEqual(
      (await decisions(s, ev)).sort(byJson),
      [[on.id, 'send', null], [paused.id, 'skip', 'paused']].sort(byJson),
    );
    // Deciding the event again (as a batch whose commit was lost would) decides nothing twice
    // (UNIQUE (event_id, campaign_id) and the pre-check).
    await sql`UPDATE events SET decided_at = NULL WHERE id = ${ev}::uuid`.execute(t.database.db);
    assert.equal(await decideBatch(t.database.db, s.teamId, () => new Date(), decideOptions({ db: t.database.db, config: testConfig() })), 'decided');
    assert.equal((await decisions(s, ev)).length, 2);
    assert.equal((await sendLog(t, s.teamId)).length, 1);
  });

  test('unsubscribed contacts are skipped', async () => {
    const s = await setup(t, sink.port);
    const c = await createCampaign(s.a, base(s));
    await s.a.post('/email/contacts/unsubscribe', { email: 'gone@example.com' });
    const c2 = await createCampaign(s.a, base(s, { events: ['lead.created'] }));
    const ev = await trigger(s, 'gone@example.com', 'lead.created');
    await drain(t);
    assert.deepEqual(await decisions(s, ev), [[c2.id, 'skip', 'unsubscribed']]);
    assert.ok(c.id);
  });

  test('a trigger is decided for the campaigns that exist when its job runs; one that no campaign listed when it was recorded is decided with none', async () => {
    const s = await setup(t, sink.port);
    // Nothing lists lead.created: recorded decided and processed, no job; a campaign made after it never takes it up.
    const early = await trigger(s, 'early@example.com', 'lead.created');
    const { rows: [atInsert] } = await t.database.pool.query(
      'SELECT processed_at = created_at AS processed, decided_at = created_at AS decided FROM events WHERE id = $1', [early]);
    assert.deepEqual(atInsert, { processed: true, decided: true }, 'recorded processed and decided in its own transaction');
    const first = await createCampaign(s.a, base(s, { events: ['lead.created'] }));
    // A campaign lists it: a job, which decides with the campaigns there are when it runs, the later one included.
    const ev = await trigger(s, 'later@example.com', 'lead.created');
    const second = await createCampaign(s.a, base(s, { events: ['lead.created'], event_triggered_send: { contact_cooldown_interval: 0 } }));
    await drain(t);
    assert.deepEqual(await decisions(s, early), []);
    const got = await s.a.get(`/email/events/${early}`);
    assert.match(got.json().event.processed_at, /Z$/, 'processed');
    assert.deepEqual((await decisions(s, ev)).map(([campaign, decision]) => [campaign, decision]).sort(byJson),
      [[first.id, 'send'], [second.id, 'send']].sort(byJson));
  });

  test('segment rules: equals, not_equals, contains, greater/less than, is_set, has_tag', async () => {
    const s = await setup(t, sink.port);
    const rules = [
      { field: 'country_code', operator: 'equals', value: 'de' },
      { field: 'first_name', operator: 'not_equals', value: 'Bob' },
      { field: 'email', operator: 'contains', value: '@example.' },
      { field: 'custom_int_1', operator: 'greater_than', value: 10 },
      { field: 'custom_dec_1', operator: 'less_than', value: 2.5 },
      { field: 'last_name', operator: 'is_set' },
      { operator: 'has_tag', value: 'vip' },
    ];
    const c = await createCampaign(s.a, base(s, { segment_query: { rules } }));
    // Groups, the `op` spelling and `tags` as a field.
    const anyRules = [{ any: [{ field: 'country_code', op: 'eq', value: 'FR' }, { field: 'tags', op: 'contains', value: 'vip' }] }];
    const c2 = await createCampaign(s.a, base(s, { segment_query: { rules: anyRules }, event_triggered_send: { contact_cooldown_interval: 0 } }));
    const good = { email: 'seg@example.com', first_name: 'Ann', last_name: 'Lee', country_code: 'DE', custom_int_1: 11, custom_dec_1: 2.4, tags: ['vip'] };
    const variants: [string, object][] = [
      ['match', {}],
      ['country', { country_code: 'FR' }],
      ['name', { first_name: 'Bob' }],
      ['int', { custom_int_1: 10 }],
      ['dec', { custom_dec_1: 2.5 }],
      ['unset', { last_name: null }],
      ['tag', { tags: ['other'] }],
    ];
    const results: Record<string, string | null> = {};
    for (const [label, change] of variants) {
      const res = await s.a.post('/email/contacts/upsert', { ...good, email: `seg-${label}@example.com`, ...change });
      assert.equal(res.statusCode, 200, res.body);
    }
    await drain(t);
    const rows = await t.database.db
      .selectFrom('campaign_decisions as d')
      .innerJoin('contacts as k', 'k.id', 'd.contact_id')
      .select(['k.email', 'd.decision', 'd.reason'])
      .where('d.campaign_id', '=', c.id)
      .execute();
    for (const r of rows) results[r.email.slice(4, r.email.indexOf('@'))] = r.reason;
    assert.deepEqual(results, {
      match: null, country: 'segment_mismatch', name: 'segment_mismatch', int: 'segment_mismatch',
      dec: 'segment_mismatch', unset: 'segment_mismatch', tag: 'segment_mismatch',
    });
    const grouped = await t.database.db
      .selectFrom('campaign_decisions as d')
      .innerJoin('contacts as k', 'k.id', 'd.contact_id')
      .select(['k.email', 'd.reason'])
      .where('d.campaign_id', '=', c2.id)
      .execute();
    const byEmail = Object.fromEntries(grouped.map((r) => [r.email.slice(4, r.email.indexOf('@')), r.reason]));
    assert.equal(byEmail.match, null, 'vip tag');
    assert.equal(byEmail.country, null, 'FR and vip');
    assert.equal(byEmail.tag, 'segment_mismatch', 'DE without vip');
  });

  test('malformed segment rules are 422 at create, naming the rule', async () => {
    const s = await setup(t, sink.port);
    const res = await s.a.post('/email/campaigns', {
      name: 'x', events: ['contact.saved'], ...base(s),
      segment_query: {
        rules: [
          { field: 'first_name', operator: 'like', value: 'a' }, { field: 'nope', operator: 'equals', value: 1 }, 'x',
          { any: [{ field: 'custom_int_1', op: 'gt', value: 'ten' }] },
        ],
      },
    });
    assert.equal(res.statusCode, 422);
    const body = res.json();
    assert.equal(body.ok, false);
    assert.equal(body.error.code, 'VALIDATION_FAILED');
    assert.deepEqual(body.error.details.map((d: any) => d.field), [
      'segment_query.rules[0].operator', 'segment_query.rules[1].field', 'segment_query.rules[2]', 'segment_query.rules[3].any[0].value',
    ]);
  });

  test('cooldown and daily cap follow the engine clock (UTC days)', async () => {
    const s = await setup(t, sink.port);
    const c = await createCampaign(s.a, base(s, { event_triggered_send: { contact_cooldown_interval: 3600, contact_daily_email_cap: 2 } }));
    const at = (iso: string) => () => new Date(iso);
    const steps: [string, string | null][] = [
      ['2030-01-01T08:00:00Z', null],
      ['2030-01-01T08:30:00Z', 'cooldown'],
      ['2030-01-01T09:00:01Z', null],
      ['2030-01-01T12:00:00Z', 'daily_cap'],
      ['2030-01-01T23:59:59Z', 'daily_cap'],
      ['2030-01-02T00:00:00Z', null],
    ];
    for (const [now, reason] of steps) {
      const ev = await trigger(s, 'clock@example.com');
      await drain(t, { now: at(now) });
      const [[, decision, why]] = await decisions(s, ev);
      assert.deepEqual([now, why], [now, reason]);
      assert.equal(decision, reason ? 'skip' : 'send');
    }
    assert.equal((await sendLog(t, s.teamId)).length, 3);
    assert.ok(c.id);
  });

  /**
   * Rows of email_send_log that a captured statement reads (EXPLAIN ANALYZE of
   * its text and values: rows returned plus rows read and filtered out, per
   * loop), and the indexes it reads them through.
   */
  async function logRowsRead(statement: { text: string; values: readonly unknown[] }): Promise<{ read: number; indexes: string[] }> {
    const nodes = await planNodes(t.database.pool, statement, { analyze: true });
    const read = nodes.filter((n) => n['Relation Name'] === 'email_send_log')
      .reduce((sum, n) => sum + ((n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0)) * (n['Actual Loops'] ?? 1), 0);
    return { read, indexes: indexesOf(nodes, 'email_send_log') };
  }

  const ACCOUNT_COUNT = /mail_account_usage[\s\S]*count\(\*\)[\s\S]*FROM email_send_log/;
  const dbDay = async () => (await t.database.pool.query<{ d: string }>(`SELECT (now() AT TIME ZONE 'UTC')::date::text AS d`)).rows[0]!.d;

  /** An event of the team that nothing will process again (for log rows that need one). */
  async function settledEvent(teamId: string): Promise<string> {
    const { rows } = await sql<{ id: string }>`
      INSERT INTO events (team_id, name, payload, decided_at, processed_at)
      VALUES (${teamId}, 'contact.saved', '{}', now(), now()) RETURNING id`.execute(t.database.db);
    return rows[0]!.id;
  }

  // Event-triggered messages waiting for a slot, whatever day they were
  // decided on, take the day's slots before anything decided now; they can be
  // far more than the cap (a burst decided before the sends catch up, or a day
  // at the limit). Deciding asks only whether the count is below the cap, so it
  // reads no more than cap of them.
  test('an account\'s waiting event-triggered messages count, up to its campaign cap, whatever day they were made', async () => {
    const s = await setup(t, sink.port);
    const limited = await insertAccount(t, s.teamId, sink.port, { daily_limit: 10, campaign_share_percent: 50 }); // cap 5
    const event = await settledEvent(s.teamId);
    await sql`
      INSERT INTO email_send_log (team_id, mail_account_id, email, status, source, event_id, created_at)
      SELECT ${s.teamId}::uuid, ${limited}::uuid, 'queued' || i || '@example.com', 'queued', 'campaign', ${event}::uuid, now() - interval '2 days'
        FROM generate_series(1, 3000) AS i`.execute(t.database.db);
    const c = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [limited] });
    const ev = await trigger(s, 'over@example.com');
    const sent = await captured(ACCOUNT_COUNT, () => drain(t));
    assert.deepEqual(await decisions(s, ev), [[c.id, 'skip', 'account_daily_limit']]);
    assert.equal(sent.length, 1);
    const { read, indexes } = await logRowsRead(sent[0]!);
    assert.ok(read <= 5, `rows of the log read to count the account: ${read}`);
    assert.deepEqual(indexes, ['email_send_log_account_pending_idx']);
  });

  // The daily limit counts SMTP claims of the UTC day (mail_account_usage),
  // not log rows created that day: mail sent today is not read again for every
  // batch of decisions, waiting broadcast messages take their slots when (and
  // if) they are claimed, and waiting transactional messages, whose jobs run
  // first, are counted.
  test('the account count is today\'s claims plus waiting event-triggered and transactional messages, never the day\'s log', async (ctx) => {
    const s = await setup(t, sink.port);
    const day = await dbDay();
    const big = await insertAccount(t, s.teamId, sink.port, { daily_limit: 1_000_000, from_email: 'big@plover.test' });
    // 2,000 sent today and 2,000 broadcast messages waiting (no event).
    await sql`
      INSERT INTO email_send_log (team_id, mail_account_id, email, status, source, created_at, sent_at)
      SELECT ${s.teamId}::uuid, ${big}::uuid, 'sent' || i || '@example.com', CASE WHEN i % 2 = 0 THEN 'sent' ELSE 'queued' END,
             'campaign', now(), CASE WHEN i % 2 = 0 THEN now() END
        FROM generate_series(1, 4000) AS i`.execute(t.database.db);
    const onBig = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [big] });
    const ev1 = await trigger(s, 'busy-day@example.com');
    const counts = await captured(ACCOUNT_COUNT, () => drain(t));
    assert.deepEqual(await decisions(s, ev1), [[onBig.id, 'send', null]]);
    assert.equal(counts.length, 1);
    const { read } = await logRowsRead(counts[0]!);
    assert.equal(read, 0, `rows of the log read to count a busy day: ${read}`);
    assert.equal((await s.a.post(`/email/campaigns/${onBig.id}/stop`)).statusCode, 200);

    // Cap 5: three slots claimed today (no log row of the day) and one
    // transactional message waiting (no job here, so it stays) leave one.
    const small = await insertAccount(t, s.teamId, sink.port, { daily_limit: 10, campaign_share_percent: 50, from_email: 'small@plover.test' });
    await sql`
      INSERT INTO mail_account_usage (mail_account_id, day, team_id, claimed)
      VALUES (${small}::uuid, (now() AT TIME ZONE 'UTC')::date, ${s.teamId}::uuid, 3)`.execute(t.database.db);
    await sql`
      INSERT INTO email_send_log (team_id, mail_account_id, email, status, source)
      VALUES (${s.teamId}::uuid, ${small}::uuid, 'reset@example.com', 'queued', 'transactional')`.execute(t.database.db);
    const onSmall = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [small] });
    const onlySmall = async (ev: string) => (await decisions(s, ev)).filter((d) => d[0] === onSmall.id);
    const ev2 = await trigger(s, 'fourth@example.com');
    await drain(t);
    assert.deepEqual(await onlySmall(ev2), [[onSmall.id, 'send', null]]);
    const ev3 = await trigger(s, 'fifth@example.com');
    await drain(t);
    // The day's claims count on the database's UTC day: across its midnight this proves nothing.
    if ((await dbDay()) !== day) return ctx.skip('crossed UTC midnight');
    // ev2's message was claimed (sent): four claims and one waiting message fill the cap.
    const { rows: usage } = await sql<{ claimed: number }>`
      SELECT claimed FROM mail_account_usage WHERE mail_account_id = ${small}::uuid`.execute(t.database.db);
    assert.deepEqual(usage, [{ claimed: 4 }]);
    assert.deepEqual(await onlySmall(ev3), [[onSmall.id, 'skip', 'account_daily_limit']]);
  });

  test('two events for one contact with a cap of 1, two deciders at once: exactly one send', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, base(s, { event_triggered_send: { contact_cooldown_interval: 0, contact_daily_email_cap: 1 } }));
    for (let round = 0; round < 3; round++) {
      const email = `race${round}@example.com`;
      const ids = [await trigger(s, email), await trigger(s, email)];
      // Two deciders at once (two worker processes' lanes): one takes the team, the other finds it busy.
      const opts = decideOptions({ db: t.database.db, config: testConfig() });
      const clock = () => new Date('2030-02-01T10:00:00Z');
      const outcomes = await Promise.all(ids.map(() => decideBatch(t.database.db, s.teamId, clock, opts)));
      // One took both events in its batch; the other found the team busy or nothing left.
      assert.deepEqual(outcomes.filter((o) => o === 'decided'), ['decided'], outcomes.join());
      const sends = await t.database.db
        .selectFrom('campaign_decisions').select(['decision', 'reason']).where('event_id', 'in', ids).execute();
      assert.deepEqual(sends.map((d) => d.reason ?? 'send').sort(), ['daily_cap', 'send'], `round ${round}`);
    }
  });

  test('no active mail account, and accounts at their daily limit', async () => {
    const s = await setup(t, sink.port);
    const disabled = await createCampaign(s.a, base(s));
    await t.database.db.updateTable('mail_accounts').set({ status: 'disabled' }).where('id', '=', s.accountId).execute();
    // Campaign mail may use 10 % of 10 a day: one slot (the rest is kept for transactional mail).
    const limited = await insertAccount(t, s.teamId, sink.port, { daily_limit: 10, campaign_share_percent: 10 });
    const capped = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [limited] });
    const e1 = await trigger(s, 'acc1@example.com');
    const e2 = await trigger(s, 'acc2@example.com');
    await drain(t);
    // The two jobs run at once: whichever decides first takes the account's one
    // slot of the day (race-free: never both), the other is skipped.
    const both = [...(await decisions(s, e1)), ...(await decisions(s, e2))];
    assert.deepEqual(both.filter((d) => d[0] === disabled.id).map((d) => d[2]), ['no_mail_account', 'no_mail_account']);
    assert.deepEqual(both.filter((d) => d[0] === capped.id).map((d) => d[2]).sort(byJson), ['account_daily_limit', null].sort(byJson));
    const e3 = await trigger(s, 'acc3@example.com');
    await drain(t);
    assert.deepEqual((await decisions(s, e3)).sort(byJson), [[capped.id, 'skip', 'account_daily_limit'], [disabled.id, 'skip', 'no_mail_account']].sort(byJson));
  });

  test('template and account rotation: round-robin, skipping disabled accounts and accounts at their limit', async () => {
    const s = await setup(t, sink.port);
    const t2 = await createTemplate(s.a, { name: 'Second', subject: 'Second' });
    const a2 = await insertAccount(t, s.teamId, sink.port, { from_email: 'two@plover.test' });
    const a3 = await insertAccount(t, s.teamId, sink.port, { from_email: 'three@plover.test' });
    const a4 = await insertAccount(t, s.teamId, sink.port, { from_email: 'four@plover.test', daily_limit: 1, campaign_share_percent: 100 });
    await createCampaign(s.a, { template_ids: [s.templateId, t2], mail_account_ids: [s.accountId, a3, a2, a4] });
    await t.database.db.updateTable('mail_accounts').set({ status: 'disabled' }).where('id', '=', a3).execute();
    for (let i = 0; i < 6; i++) {
      await trigger(s, `rot${i}@example.com`);
      await drain(t);
    }
    const logs = await sendLog(t, s.teamId);
    assert.equal(logs.length, 6);
    const byEmail = new Map(logs.map((l) => [l.email, l]));
    const order = Array.from({ length: 6 }, (_, i) => byEmail.get(`rot${i}@example.com`)!);
    assert.deepEqual(order.map((l) => l.template_id), [s.templateId, t2, s.templateId, t2, s.templateId, t2]);
    assert.deepEqual(order.map((l) => l.mail_account_id), [s.accountId, a2, a4, s.accountId, a2, s.accountId]);
    assert.ok(order.every((l) => l.status === 'sent'));
  });
});
