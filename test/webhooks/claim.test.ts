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
});
