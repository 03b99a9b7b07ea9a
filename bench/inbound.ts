// `npm run bench -- inbound [--dsns <n>] [--connections <n>]`
//
// DSNs per second through the inbound SMTP listener into the database: N
// messages (default 5,000) are put in the log as sent; N real Postfix DSNs
// (test/fixtures/inbound/postfix-hard-5.1.1.eml, one per message, to its
// signed return path) are delivered over SMTP by `--connections` pooled
// nodemailer connections (default 50); the run ends when the last 250 came
// back, by which time every bounce is committed (the listener answers 250
// after its batch commits), which the bench checks. The listener runs in its
// own process (bench/servers/inbound.ts), as does the same-run baseline: a bare
// smtp-server with the same options that accepts and discards every message,
// so the ratio is what parsing (in the untrusted pool) and recording cost. A
// third run gives the pool's threads the normal CPU priority instead of nice
// 10: on a machine shared with other work, nice 10 threads get a small share
// of the cores, and that run shows how much of the gap that is.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import nodemailer from 'nodemailer';
import { returnPathAddress } from '../src/inbound/address.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';

const DOMAIN = 'bounces.bench.test';
/** DSNs sent before the timed run (connections, the pool's threads). */
const WARM = 100;
type Variant = 'baseline' | 'listener' | 'listener-nice0';

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags.dsns ?? 5_000;
  const connections = Math.min(opts.connections, 200);
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const { db, appSecret } = database;
  const { rows: [team] } = await sql<{ id: string }>`INSERT INTO teams (name) VALUES ('bench') RETURNING id`.execute(db);
  const teamId = team!.id;
  const template = readFileSync(new URL('../test/fixtures/inbound/postfix-hard-5.1.1.eml', import.meta.url), 'latin1');

  const makeMessages = async () => {
    await sql`DELETE FROM email_send_log`.execute(db);
    const { rows } = await sql<{ id: string }>`
      INSERT INTO email_send_log (team_id, email, status, source, sent_at)
      SELECT ${teamId}, 'r' || g || '@example.com', 'sent', 'transactional', now() FROM generate_series(1, ${n + WARM}) g
      RETURNING id`.execute(db);
    await sql`UPDATE email_send_log SET message_id = id || '@news.bench.test'`.execute(db);
    await sql`VACUUM ANALYZE email_send_log`.execute(db);
    return rows.map((r) => ({
      to: returnPathAddress(appSecret, DOMAIN, r.id),
      raw: template.replaceAll('@@MESSAGE_ID@@', `${r.id}@news.bench.test`),
    }));
  };

  const runOnce = async (variant: Variant): Promise<{ rate: number; recorded: number }> => {
    const mode = variant === 'baseline' ? 'baseline' : 'listener';
    const dsns = await makeMessages();
    const server = await startServer('inbound', { mode, databaseUrl: database.url, appSecret, domain: DOMAIN, niceIncrement: variant === 'listener-nice0' ? 0 : 10 }, { log: opts.log });
    try {
      const { port } = (await (await fetch(`${server.origin}/smtp`)).json()) as { port: number };
      const client = nodemailer.createTransport({
        host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, maxConnections: connections, maxMessages: Infinity,
      });
      // Warm-up, not timed: connections open, the pool's threads started and their modules loaded.
      let next = 0;
      await Promise.all(Array.from({ length: Math.min(connections, WARM) }, async () => {
        while (next < WARM) {
          const d = dsns[next++]!;
          await client.sendMail({ envelope: { from: '', to: [d.to] }, raw: d.raw });
        }
      }));
      const t0 = performance.now();
      await Promise.all(Array.from({ length: connections }, async () => {
        while (next < dsns.length) {
          const d = dsns[next++]!;
          await client.sendMail({ envelope: { from: '', to: [d.to] }, raw: d.raw });
        }
      }));
      const seconds = (performance.now() - t0) / 1000;
      client.close();
      const { rows } = await sql<{ n: string }>`SELECT count(*) AS n FROM message_feedback`.execute(db);
      await sql`DELETE FROM message_feedback`.execute(db);
      return { rate: n / seconds, recorded: Number(rows[0]!.n) - (mode === 'listener' ? WARM : 0) };
    } finally {
      await server.stop();
    }
  };

  opts.log(`inbound: ${n} DSNs over ${connections} connections, baseline, listener, listener with pool at nice 0, twice each`);
  const results: Record<Variant, number[]> = { baseline: [], listener: [], 'listener-nice0': [] };
  for (let round = 0; round < 2; round++) {
    for (const variant of ['baseline', 'listener', 'listener-nice0'] as const) {
      const r = await runOnce(variant);
      if (variant !== 'baseline' && r.recorded !== n) throw new Error(`${variant} recorded ${r.recorded} of ${n} bounces`);
      results[variant].push(r.rate);
      opts.log(`  ${variant} #${round + 1}: ${fmt(r.rate)} messages/s${variant !== 'baseline' ? ` (${r.recorded} bounces recorded)` : ''}`);
    }
  }
  const best = (v: Variant) => Math.max(...results[v]);
  console.log(`\ninbound: ${fmt(n)} DSNs per run, ${connections} SMTP connections, best of 2 runs each`);
  console.log(table(['server', 'messages/s', 'ratio'], [
    ['baseline: smtp-server accepting and discarding', best('baseline'), '1.00'],
    ['listener: parsed in the pool, bounce recorded before 250', best('listener'), fmt(best('listener') / best('baseline'))],
    ['listener, pool threads at nice 0', best('listener-nice0'), fmt(best('listener-nice0') / best('baseline'))],
  ]));
  const goal = 1_000;
  console.log(`goal >= ${fmt(goal)} DSNs/s through the listener into the database: ${best('listener') >= goal ? 'met' : 'missed'}`);
}
