// `npm run bench -- webhooks-backlog [--backlog <n>]`
//
// The paused backlog's costs, on a table with 2 × n parked deliveries (two
// disabled webhooks, default n = 100,000) and 10,000 due ones: the claim's
// plan (it must read only due rows: EXPLAIN with buffers), pending_count
// (index-only count) before and after VACUUM, the backlog bound with nothing
// and with half to drop, and the enable's unpark of a whole backlog.
// Statistics are left stale before the first EXPLAIN, as a queue table's are.
import { enforcePausedBacklog } from '../src/webhooks/backlog.ts';
import { unparkDeliveries } from '../src/webhooks/deliveries.ts';
import { fmt, table } from './lib/report.ts';
import type { BenchOptions } from './lib/types.ts';

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags.backlog ?? 100_000;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const { db, pool } = database;
  const q = (text: string, params: unknown[] = []) => pool.query(text, params);
  const team = (await q(`INSERT INTO teams (name) VALUES ('backlog bench') RETURNING id`)).rows[0].id as string;
  const hooks = (
    await q(
      `INSERT INTO webhooks (team_id, url, events, secret_enc, is_enabled)
       SELECT $1, 'http://127.0.0.1/', '{email.contact.saved}', '\\x00', i = 1 FROM generate_series(1, 3) i RETURNING id, is_enabled`,
      [team],
    )
  ).rows as { id: string; is_enabled: boolean }[];
  const on = hooks.find((h) => h.is_enabled)!.id;
  const off = hooks.filter((h) => !h.is_enabled).map((h) => h.id);
  opts.log(`inserting 2 × ${n} parked and 10,000 due deliveries`);
  for (const id of off) {
    await q(
      `INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, next_attempt_at, created_at)
       SELECT plover_uuid_v7(), $1, $2, 'email.contact.saved', '{}'::json, NULL, now() - i * interval '1 second' FROM generate_series(1, $3::int) i`,
      [team, id, n],
    );
  }
  await q(
    `INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, next_attempt_at)
     SELECT plover_uuid_v7(), $1, $2, 'email.contact.saved', '{}'::json, now() - i * interval '1 millisecond' FROM generate_series(1, 10000) i`,
    [team, on],
  );
  const claimPlan = async () => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await c.query('SET LOCAL enable_bitmapscan = off'); // as plover_claim_webhook_deliveries (migration 0029) sets for its body
      const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
        SELECT d.id FROM webhook_deliveries d
        WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND (d.locked_until IS NULL OR d.locked_until < now())
        ORDER BY d.next_attempt_at LIMIT 100 FOR UPDATE SKIP LOCKED`);
      await c.query('ROLLBACK');
      return rows.map((r) => r['QUERY PLAN'] as string).join('\n');
    } finally {
      c.release();
    }
  };
  console.log(`\nclaim of 100 due rows with ${2 * n} parked present (stale statistics):\n${await claimPlan()}`);
  // The claim itself (the function claimDueDeliveries calls), rolled back: its
  // own SET clause must give it the plan above (a bitmap scan reads and sorts
  // every due row: about 13 ms per claim with 10,000 due).
  const claimMs = async () => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const t = performance.now();
      await c.query('SELECT count(*) FROM plover_claim_webhook_deliveries(100, 30000)');
      const ms = performance.now() - t;
      await c.query('ROLLBACK');
      return ms;
    } finally {
      c.release();
    }
  };
  const median = async (fn: () => Promise<unknown>) => {
    const runs: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t0 = performance.now();
      await fn();
      runs.push(performance.now() - t0);
    }
    return runs.sort((a, b) => a - b)[3]!;
  };
  const countOf = (id: string) => q(`SELECT count(*)::int FROM webhook_deliveries pd WHERE pd.webhook_id = $1 AND pd.status = 'pending'`, [id]);
  const rows: string[][] = [];
  rows.push(['claim of 100 of 10,000 due (stale statistics)', fmt(await median(claimMs), 2)]);
  rows.push([`pending_count of ${n} parked, before VACUUM`, fmt(await median(() => countOf(off[0]!)), 2)]);
  await q('VACUUM ANALYZE webhook_deliveries');
  rows.push([`pending_count of ${n} parked, after VACUUM`, fmt(await median(() => countOf(off[0]!)), 2)]);
  rows.push(['pending_count of 10,000 due', fmt(await median(() => countOf(on)), 2)]);
  let t0 = performance.now();
  await enforcePausedBacklog(db, { maxAgeDays: 7, maxCount: n });
  rows.push(['backlog bound, nothing to drop', fmt(performance.now() - t0, 1)]);
  t0 = performance.now();
  const drops = await enforcePausedBacklog(db, { maxAgeDays: 7, maxCount: Math.floor(n / 2) });
  rows.push([`backlog bound, ${drops.overCount} to drop`, fmt(performance.now() - t0, 1)]);
  t0 = performance.now();
  const unparked = await db.transaction().execute((tx) => unparkDeliveries(tx, team, off[1]!));
  rows.push([`enable's unpark of ${unparked}`, fmt(performance.now() - t0, 1)]);
  console.log(`\n${table(['operation', 'ms'], rows, ['left', 'right'])}`);
  console.log(`\nclaim after the unpark (${unparked} more due):\n${await claimPlan()}`);
}
