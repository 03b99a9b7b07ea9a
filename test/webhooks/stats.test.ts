// Webhook delivery statistics (src/webhooks/stats.ts): recorded attempts feed
// the per-webhook buckets through deltas in the same statement, a lost lease
// records (and counts) nothing, the fold moves deltas without changing a read,
// another team's webhook reads empty, and the latency percentiles read from
// the histogram stay within one bin of percentile_cont over the durations.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { recordAttempts, type AttemptResult } from '../../src/webhooks/deliveries.ts';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { foldWebhookStats, latencyBin, quantile, webhookSeries, type Histogram } from '../../src/webhooks/stats.ts';
import { createTestDatabase, makeTeam, testConfig, type TestDatabase } from '../helpers.ts';

/** percentile_cont over raw values. */
function exactQuantile(values: number[], q: number): number {
  const v = [...values].sort((a, b) => a - b);
  const p = q * (v.length - 1);
  const lo = Math.floor(p);
  return lo === p ? v[lo]! : v[lo]! + (v[lo + 1]! - v[lo]!) * (p - lo);
}

function histogramOf(values: number[]): Histogram {
  const by = new Map<number, number>();
  for (const ms of values) by.set(latencyBin(ms), (by.get(latencyBin(ms)) ?? 0) + 1);
  return [...by].map(([bin, n]) => ({ bin, n }));
}

describe('webhook statistics', () => {
  let d: TestDatabase;
  before(async () => {
    d = await createTestDatabase();
  });
  after(() => d.drop());

  test('percentiles from the histogram are within one bin of the exact ones', () => {
    let seed = 42;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    for (let round = 0; round < 300; round++) {
      const n = 1 + Math.floor(random() * 200);
      const spread = [10, 1_000, 30_000][round % 3]!;
      const values = Array.from({ length: n }, () => Math.round(random() ** 2 * spread));
      const hist = histogramOf(values);
      for (const q of [0, 0.5, 0.95, 1]) {
        const exact = exactQuantile(values, q);
        const est = quantile(hist, q)!;
        // One bin is a factor 2^(1/8) on (1 + ms).
        assert.ok(Math.abs(est - exact) <= (2 ** (1 / 8) - 1) * (exact + 1) + 1e-9, `q ${q} of ${values.length} values: ${est} against ${exact}`);
      }
    }
    assert.equal(quantile([], 0.5), null);
    assert.equal(latencyBin(0), 0);
    assert.equal(latencyBin(10 ** 9), 159, 'anything longer lands in the last bin');
  });

  test('recorded attempts count once, only where the lease holds; the fold keeps reads exact; other teams read nothing', async () => {
    const { teamId } = await makeTeam(d.db);
    const other = await makeTeam(d.db, 'Other team');
    const box = webhookSecretBox(testConfig().appSecret);
    const hook = await createWebhook(d.db, box, teamId, { url: 'https://hooks.example.com/a', events: ['email.sent'] });
    const lease = new Date(Date.now() + 60_000);
    const { rows } = await sql<{ id: string }>`
      INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, status, attempts, locked_until)
      SELECT gen_random_uuid(), ${teamId}::uuid, ${hook.id}::uuid, 'email.sent', '{}', 'pending', 0, ${lease}::timestamptz
        FROM generate_series(1, 5) RETURNING id`.execute(d.db);
    const now = new Date();
    const result = (id: string, code: number | null, ms: number, myLease = lease): AttemptResult => ({
      id, webhook_id: hook.id, lease: myLease, at: now, status: code !== null && code < 300 ? 'success' : 'failed',
      response_code: code, response_body: null, error: code === null ? 'timeout' : null, duration_ms: ms, next_attempt_at: null, gone: false,
    });
    const durations = [50, 100, 300, 900];
    await recordAttempts(d.db, [
      result(rows[0]!.id, 200, durations[0]!), result(rows[1]!.id, 200, durations[1]!),
      result(rows[2]!.id, null, durations[2]!), result(rows[3]!.id, 500, durations[3]!),
      // A claim that is no longer ours records nothing, and so counts nothing.
      result(rows[4]!.id, 200, 5, new Date(lease.getTime() - 1)),
    ]);
    const from = new Date(now.getTime() - 3_600_000);
    const to = new Date(now.getTime() + 60_000);
    const read = async () => {
      const series = await webhookSeries(d.db, teamId, hook.id, from, to, 'hour');
      const point = series.find((p) => p.attempts > 0)!;
      return { sum: series.reduce((s, p) => s + p.attempts, 0), point };
    };
    const before = await read();
    assert.equal(before.sum, 4);
    assert.deepEqual([before.point.attempts, before.point.succeeded, before.point.failed], [4, 2, 2]);
    const tolerance = (exact: number) => (2 ** (1 / 8) - 1) * (exact + 1);
    assert.ok(Math.abs(before.point.p50_ms! - 200) <= tolerance(200), `median ${before.point.p50_ms}`);
    assert.ok(Math.abs(before.point.p95_ms! - 810) <= tolerance(810), `p95 ${before.point.p95_ms}`);
    const { rows: deltas } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_stats_deltas WHERE webhook_id = ${hook.id}::uuid`.execute(d.db);
    assert.ok(deltas[0]!.n > 0, 'deltas written');

    assert.ok((await foldWebhookStats(d.db)) >= deltas[0]!.n);
    const { rows: left } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_stats_deltas`.execute(d.db);
    assert.equal(left[0]!.n, 0, 'every delta folded');
    assert.deepEqual(await read(), before, 'the same answer from the buckets');

    // A second round after the fold adds to the same buckets.
    await sql`UPDATE webhook_deliveries SET locked_until = ${lease}::timestamptz WHERE id = ${rows[2]!.id}::uuid`.execute(d.db);
    await recordAttempts(d.db, [result(rows[2]!.id, 204, 100)]);
    const afterRetry = await read();
    assert.deepEqual([afterRetry.point.attempts, afterRetry.point.succeeded], [5, 3]);
    await foldWebhookStats(d.db);
    assert.deepEqual(await read(), afterRetry);

    // The webhook read as another team: nothing, every slot zero.
    const foreign = await webhookSeries(d.db, other.teamId, hook.id, from, to, 'hour');
    assert.ok(foreign.length >= 1 && foreign.every((p) => p.attempts === 0 && p.p50_ms === null));
  });
});
