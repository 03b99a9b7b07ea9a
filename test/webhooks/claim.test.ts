// The dispatcher's claim (claimDueDeliveries: one statement through the
// plover_claim_webhook_deliveries function of migration 0029) and the record
// of an attempt against a disable that lands while the attempt is out.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { claimDueDeliveries, parkDeliveries, recordAttempts, type AttemptResult } from '../../src/webhooks/deliveries.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { createTestDatabase, makeTeam, testConfig, type TestDatabase } from '../helpers.ts';

describe('webhook claim and record', () => {
  let d: TestDatabase;
  before(async () => {
    d = await createTestDatabase();
  });
  after(() => d.drop());

  const setup = async (name: string) => {
    const { teamId } = await makeTeam(d.db, name);
    const box = webhookSecretBox(testConfig().appSecret);
    const hook = await createWebhook(d.db, box, teamId, { url: 'https://hooks.example.com/a', events: ['email.sent'] });
    return { teamId, hook };
  };
  /** Deliveries due `secondsAgo` ago (negative: in the future), their payload numbering them. */
  const insert = async (teamId: string, hookId: string, due: (number | null)[]) => {
    const { rows } = await sql<{ id: string }>`
      INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, next_attempt_at)
      SELECT plover_uuid_v7(), ${teamId}::uuid, ${hookId}::uuid, 'email.sent', json_build_object('id', 'env-' || x.i, 'n', x.i),
             now() - x.s * interval '1 second'
        FROM unnest(${due}::float8[]) WITH ORDINALITY AS x(s, i) ORDER BY x.i RETURNING id`.execute(d.db);
    return rows.map((r) => r.id);
  };
  const row = async (id: string) => (await sql<{ status: string; next_attempt_at: Date | null; locked_until: Date | null }>`
    SELECT status, next_attempt_at, locked_until FROM webhook_deliveries WHERE id = ${id}`.execute(d.db)).rows[0]!;
  const result = (id: string, hookId: string, lease: Date, status: AttemptResult['status'], next: Date | null): AttemptResult => ({
    id, webhook_id: hookId, lease, at: new Date(), status, response_code: 503, response_body: null, error: 'receiver answered 503',
    duration_ms: 5, next_attempt_at: next, gone: false,
  });

  test('claims due rows oldest first up to the limit, with a lease, and never a leased, parked or future one', async () => {
    const { teamId, hook } = await setup('Claim');
    // Due 30, 20 and 10 s ago, one in an hour, one parked (null).
    const ids = await insert(teamId, hook.id, [30, 20, 10, -3_600, null]);
    const first = await claimDueDeliveries(d.db, 2, 60_000);
    assert.deepEqual(first.map((c) => c.id), [ids[0], ids[1]]);
    assert.deepEqual(first.map((c) => c.payload), [{ id: 'env-1', n: 1 }, { id: 'env-2', n: 2 }]);
    assert.equal(first[0]!.url, 'https://hooks.example.com/a');
    assert.ok(first[0]!.lease.getTime() > Date.now() + 50_000, 'leased for about a minute');
    assert.deepEqual((await row(ids[0]!)).locked_until, first[0]!.lease);
    // The leased ones are not claimed again; the future and the parked never.
    const second = await claimDueDeliveries(d.db, 10, 60_000);
    assert.deepEqual(second.map((c) => c.id), [ids[2]]);
    assert.deepEqual(await claimDueDeliveries(d.db, 10, 60_000), []);
  });

  test('the claim reaches its rows by index however large the log, planned as the function plans it (generic)', async () => {
    const { teamId, hook } = await setup('Plan');
    // A log of 6,000 rows (retention keeps delivered ones), analysed.
    await insert(teamId, hook.id, Array.from({ length: 6_000 }, (_, i) => i % 3 === 0 ? 5 : -3_600));
    await sql`ANALYZE webhook_deliveries`.execute(d.db);
    // The function's own statement, from the catalogue, with its arguments as parameters:
    // a SQL function's statement is planned without their values.
    const { rows: fn } = await sql<{ src: string }>`
      SELECT prosrc AS src FROM pg_proc WHERE proname = 'plover_claim_webhook_deliveries'`.execute(d.db);
    const text = fn[0]!.src.replaceAll('p_limit', '$1').replaceAll('p_lease_ms', '$2');
    type Node = { 'Node Type': string; 'Relation Name'?: string; 'Index Name'?: string; Plans?: Node[] };
    const client = await d.pool.connect();
    let plan: Node;
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL enable_bitmapscan = off'); // as the function's SET clause
      await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE claim_plan (int, int) AS ${text}`);
      const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: Node }] }>('EXPLAIN (FORMAT JSON) EXECUTE claim_plan (100, 30000)');
      plan = rows[0]!['QUERY PLAN'][0].Plan;
    } finally {
      await client.query('ROLLBACK');
      client.release();
      // The other tests claim from the same queue.
      await sql`DELETE FROM webhook_deliveries WHERE webhook_id = ${hook.id}`.execute(d.db);
    }
    const scans: string[] = [];
    const walk = (n: Node) => {
      if (n['Relation Name'] === 'webhook_deliveries' && n['Node Type'].endsWith('Scan')) scans.push(`${n['Node Type']} ${n['Index Name'] ?? ''}`.trim());
      n.Plans?.forEach(walk);
    };
    walk(plan);
    assert.equal(scans.length, 2, JSON.stringify(scans));
    assert.ok(scans.every((s) => s.startsWith('Index')), `every read of the log is by index: ${JSON.stringify(scans)}`);
    assert.ok(scans.some((s) => s.includes('webhook_deliveries_pkey')), `the claimed rows by primary key: ${JSON.stringify(scans)}`);
  });

  test("the envelope's timestamp is the event's occurred_at as JavaScript writes it, in UTC years 0 and 10000 too", async () => {
    const { teamId, hook } = await setup('Years');
    // In time order (the claim's order): 1 BC (to_char spelled it 0001: a year off), an ordinary time, 10000 (to_char: 10000-…, not ISO 8601).
    const times = ['0001-01-01T00:00:00+15:59', '2030-01-01T00:00:00.123999Z', '9999-12-31T23:59:59-15:59'];
    const { rows } = await sql<{ id: string }>`
      WITH ev AS (
        INSERT INTO events (team_id, name, payload, occurred_at, processed_at)
        SELECT ${teamId}::uuid, 'email.sent', '{}'::jsonb, x.at, now() FROM unnest(${times}::timestamptz[]) WITH ORDINALITY AS x(at, i)
        RETURNING id, occurred_at
      )
      INSERT INTO webhook_deliveries (id, team_id, webhook_id, event_id, event, next_attempt_at)
      SELECT plover_uuid_v7(), ${teamId}::uuid, ${hook.id}::uuid, ev.id, 'email.sent',
             now() - interval '1 hour' + row_number() OVER (ORDER BY ev.occurred_at) * interval '1 second'
        FROM ev RETURNING id`.execute(d.db);
    assert.equal(rows.length, 3);
    const claimed = await claimDueDeliveries(d.db, 10, 60_000);
    const stamps = claimed.filter((c) => c.webhook_id === hook.id).map((c) => (c.payload as { timestamp: string }).timestamp);
    assert.deepEqual(stamps, times.map((at) => new Date(at).toISOString()));
  });

  test("a disabled webhook's due row is parked by the claim, not handed out", async () => {
    const { teamId, hook } = await setup('Disabled');
    const [id] = await insert(teamId, hook.id, [5]);
    await sql`UPDATE webhooks SET is_enabled = false WHERE id = ${hook.id}`.execute(d.db);
    assert.deepEqual((await claimDueDeliveries(d.db, 10, 60_000)).filter((c) => c.webhook_id === hook.id), []);
    const r = await row(id!);
    assert.equal(r.next_attempt_at, null);
    assert.equal(r.locked_until, null);
  });

  test('a disable that lands while an attempt is out keeps its retry parked; without one the retry is scheduled', async () => {
    const { teamId, hook } = await setup('Disable during attempt');
    const [parked, plain] = await insert(teamId, hook.id, [2, 1]);
    const claimed = await claimDueDeliveries(d.db, 10, 60_000);
    const lease = (id: string) => claimed.find((c) => c.id === id)!.lease;
    // A disable commits while both attempts are out; `plain` gets its due time back,
    // standing for a row no disable touched.
    await d.db.transaction().execute((tx) => parkDeliveries(tx, [hook.id]).then(() =>
      sql`UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = ${plain}`.execute(tx)));
    const retryAt = new Date(Date.now() + 30_000);
    await recordAttempts(d.db, [
      result(parked!, hook.id, lease(parked!), 'pending', retryAt),
      result(plain!, hook.id, lease(plain!), 'pending', retryAt),
    ]);
    const p = await row(parked!);
    assert.equal(p.status, 'pending');
    assert.equal(p.next_attempt_at, null, 'the retry waits for the enable');
    assert.equal(p.locked_until, null);
    assert.deepEqual((await row(plain!)).next_attempt_at, retryAt);
  });

  test('a disable landing while a failed attempt is recorded: both commit, no deadlock', async () => {
    const { teamId, hook } = await setup('Deadlock');
    const [id] = await insert(teamId, hook.id, [5]);
    const [claim] = await claimDueDeliveries(d.db, 10, 60_000);
    assert.equal(claim!.id, id);
    // A disable (queries.ts, updateWebhook) as two steps: the webhook row, then its deliveries parked.
    const disable = await d.pool.connect();
    try {
      await disable.query('BEGIN');
      await disable.query('SELECT id FROM webhooks WHERE id = $1 FOR UPDATE', [hook.id]);
      const recording = recordAttempts(d.db, [result(id!, hook.id, claim!.lease, 'pending', new Date(Date.now() + 60_000))]);
      const settled = recording.then(() => null, (err: Error) => err);
      // The recording waits for the webhook row (before: it had updated the delivery first).
      for (let i = 0; i < 100; i++) {
        const { rowCount } = await d.pool.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`);
        if (rowCount! > 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      // Parking the delivery does not wait for the recording (or a deadlock aborts one of them after deadlock_timeout).
      await disable.query(`UPDATE webhook_deliveries SET next_attempt_at = NULL WHERE webhook_id = $1 AND status = 'pending' AND next_attempt_at IS NOT NULL`, [hook.id]);
      await disable.query('COMMIT');
      assert.equal(await settled, null, 'the recording committed too');
    } finally {
      await disable.query('ROLLBACK').catch(() => {});
      disable.release();
    }
    const r = await row(id!);
    // Recorded after the disable committed: the retry stays parked until the enable.
    assert.equal(r.status, 'pending');
    assert.equal(r.next_attempt_at, null);
  });
});
