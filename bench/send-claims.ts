// `npm run bench -- send-claims [--claims <n>]`
//
// What counting daily limits costs the SMTP claim, the statement every sent
// message goes through (src/mail/send.ts): N queued messages of one account
// (default 3,000), claimed by 10 concurrent jobs of 50 with 5 claims in flight
// each (the worker's concurrency and an account's SMTP connections), in four
// ways, each run twice, interleaved:
//
//   plain     the claim alone, no daily limit (baseline, ratio 1.00)
//   group     what the send task does: one reservation per job
//             (Allowance.reserve), claims against its slots, the claims waiting
//             at the same moment group-committed (claimManyForSmtp through a
//             Batcher shared by the jobs), the unused slots given back
//   reserve   the same, each claim its own statement and commit (claimForSmtp;
//             the send task before group commit)
//   per-claim each claim writes the account's usage row in its own statement
//             (the design reservations replaced: every claim of an account
//             waits for the previous one's commit)
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { Allowance, claimForSmtp, claimManyForSmtp, type ClaimItem } from '../src/mail/daily-usage.ts';
import { Batcher } from '../src/lib/batcher.ts';
import { fmt, table } from './lib/report.ts';
import type { BenchOptions } from './lib/types.ts';

const JOBS_IN_FLIGHT = 10;
const JOB = 50;
const SLOTS = 5;
const LIMIT = 100_000_000;
type Variant = 'plain' | 'group' | 'reserve' | 'per-claim';

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags.claims ?? 3_000;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const { db } = database;
  const { rows: [team] } = await sql<{ id: string }>`INSERT INTO teams (name) VALUES ('bench') RETURNING id`.execute(db);
  const teamId = team!.id;
  const { rows: [acc] } = await sql<{ id: string }>`
    INSERT INTO mail_accounts (team_id, host, port, security, from_email, daily_limit)
    VALUES (${teamId}, '127.0.0.1', 25, 'none', 'a@bench.test', ${LIMIT}) RETURNING id`.execute(db);
  const account = { id: acc!.id, daily_limit: LIMIT, campaign_share_percent: 100 };

  // As the send task holds it: one per account and cap in the process, shared by its jobs.
  const group = new Batcher<ClaimItem, { attempts: number } | undefined>((items) => claimManyForSmtp(db, account.id, teamId, LIMIT, items), { max: 50 });
  const claimOne = async (v: Variant, id: string, allowance: Allowance) => {
    if (v === 'group') return group.add({ id, slotDay: allowance.take(account.id, 'transactional') });
    if (v === 'reserve') return claimForSmtp(db, { id, team_id: teamId }, account.id, LIMIT, allowance.take(account.id, 'transactional'));
    if (v === 'plain') {
      return sql`UPDATE email_send_log SET status = 'sending', attempts = attempts + 1, claimed_at = now(), updated_at = now()
                  WHERE id = ${id} AND status IN ('queued', 'deferred') RETURNING attempts`.execute(db);
    }
    return sql`
      WITH bump AS (
        INSERT INTO mail_account_usage AS u (mail_account_id, day, team_id, claimed)
        SELECT ${account.id}::uuid, (now() AT TIME ZONE 'UTC')::date, ${teamId}::uuid, 1
         WHERE EXISTS (SELECT 1 FROM email_send_log WHERE id = ${id} AND status IN ('queued', 'deferred'))
        ON CONFLICT (mail_account_id, day) DO UPDATE SET claimed = u.claimed + 1 WHERE u.claimed < ${LIMIT}::int
        RETURNING 1)
      UPDATE email_send_log SET status = 'sending', attempts = attempts + 1, claimed_at = now(), updated_at = now()
       WHERE id = ${id} AND status IN ('queued', 'deferred') AND EXISTS (SELECT 1 FROM bump) RETURNING attempts`.execute(db);
  };

  const runOnce = async (v: Variant): Promise<number> => {
    await sql`DELETE FROM email_send_log`.execute(db);
    await sql`DELETE FROM mail_account_usage`.execute(db);
    const { rows } = await sql<{ id: string }>`
      INSERT INTO email_send_log (team_id, email, status, source, mail_account_id)
      SELECT ${teamId}, 'r' || g || '@bench.test', 'queued', 'transactional', ${account.id} FROM generate_series(1, ${n}) g
      RETURNING id`.execute(db);
    await sql`VACUUM ANALYZE email_send_log`.execute(db);
    const jobs: string[][] = [];
    for (let i = 0; i < rows.length; i += JOB) jobs.push(rows.slice(i, i + JOB).map((r) => r.id));
    let nextJob = 0;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: JOBS_IN_FLIGHT }, async () => {
      while (nextJob < jobs.length) {
        const job = jobs[nextJob++]!;
        const allowance = new Allowance();
        if (v === 'reserve' || v === 'group') {
          for (let i = 0; i < job.length; i++) allowance.want(account, teamId, 'transactional');
          await allowance.reserve(db);
        }
        let next = 0;
        await Promise.all(Array.from({ length: SLOTS }, async () => {
          while (next < job.length) await claimOne(v, job[next++]!, allowance);
        }));
        await allowance.release(db);
      }
    }));
    const s = (performance.now() - t0) / 1000;
    const { rows: c } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM email_send_log WHERE status = 'sending'`.execute(db);
    if (c[0]!.n !== n) throw new Error(`${v}: ${c[0]!.n} of ${n} claimed`);
    return n / s;
  };

  const variants = ['plain', 'group', 'reserve', 'per-claim'] as const;
  const rates: Record<Variant, number[]> = { plain: [], group: [], reserve: [], 'per-claim': [] };
  for (let round = 0; round < 2; round++) {
    for (const v of variants) {
      opts.log(`send-claims: ${v}, round ${round + 1}`);
      rates[v].push(await runOnce(v));
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const base = mean(rates.plain);
  console.log(`\nsend-claims: ${fmt(n, 0)} messages of one account, ${JOBS_IN_FLIGHT} jobs of ${JOB} in flight, ${SLOTS} claims in flight per job`);
  console.log(table(
    ['claim', 'claims/s (each run)', 'mean', 'ratio'],
    variants.map((v) => [
      {
        plain: 'claim alone (baseline)', group: 'reserved slots, group-committed claims (the send task)',
        reserve: 'reserved slots, one commit per claim', 'per-claim': 'usage row written per claim',
      }[v],
      rates[v].map((r) => fmt(r, 0)).join(', '), fmt(mean(rates[v]), 0), fmt(mean(rates[v]) / base, 2),
    ]),
    ['left', 'right', 'right', 'right'],
  ));
}
