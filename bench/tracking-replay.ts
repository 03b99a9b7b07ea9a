// `npm run bench -- tracking-replay`: one message's open pixel, then one of
// its click links, fetched in a replay loop (autocannon, --connections at
// once, --duration seconds each) against the real app in its own process.
// Prints hits/s and latency, and what the loop left in the database: counted
// opens/clicks, events, webhook deliveries and stored hit rows against the raw
// number of hits. A replay of one link must count once an hour and stay cheap.
// Per hit it also prints the app's and PostgreSQL's CPU (a local server's
// postmaster and its children), and with `--pg-stats` PostgreSQL's time per
// statement (bench/lib/pg-stats.ts).
import { sql } from 'kysely';
import { TrackingLinks } from '../src/lib/tracking-links.ts';
import { createTeam } from '../src/teams/queries.ts';
import { cpuMeter, localPostmaster } from './lib/cpu.ts';
import { assertClean, measure } from './lib/load.ts';
import { pgStats, statsTable } from './lib/pg-stats.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
import type { AppServerParams } from './servers/app.ts';

const BROWSER_UA = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36';

export async function run(opts: BenchOptions): Promise<void> {
  const { connections, duration, log } = opts;
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const db = database.db;

  const team = await createTeam(db, 'Bench team');
  const { rows: contact } = await sql<{ id: string }>`
    INSERT INTO contacts (team_id, email) VALUES (${team.id}, 'reader@example.com') RETURNING id`.execute(db);
  const { rows: send } = await sql<{ id: string }>`
    INSERT INTO email_send_log (team_id, contact_id, email, status, sent_at)
    VALUES (${team.id}, ${contact[0]!.id}, 'reader@example.com', 'sent', now() - interval '1 hour') RETURNING id`.execute(db);
  const sendId = send[0]!.id;

  const params: AppServerParams = { databaseUrl: database.url, appSecret: database.appSecret };
  const app = await startServer('app', params, { log });
  opts.defer(() => app.stop());
  const links = new TrackingLinks(app.origin, database.appSecret);

  const { rows: backend } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
  const postmaster = localPostmaster(backend[0]!.pid);
  const statements = opts.switches['pg-stats'] ? await pgStats(db, log) : null;
  const perHit = (x: number | undefined, hits: number) => (x === undefined ? '-' : fmt((x * 1e6) / Math.max(1, hits), 0));
  const results: (string | number)[][] = [];
  const statementTables: string[] = [];
  const loops = [
    { label: 'open pixel', url: links.openPixelUrl(sendId) },
    { label: 'click link', url: links.clickUrl(sendId, 'https://example.com/offer') },
  ];
  for (const loop of loops) {
    log(`tracking-replay: ${loop.label}, ${connections} connections, ${duration} s`);
    await statements?.reset();
    const cpu = cpuMeter([app.pid], postmaster);
    const r = await measure({ url: loop.url, connections, duration, headers: { 'user-agent': BROWSER_UA } }, app);
    const spent = cpu();
    // Clicks answer 302, which autocannon counts as non-2xx: only errors matter here.
    assertClean(loop.label, { ...r, non2xx: 0 });
    results.push([loop.label, fmt(r.reqPerSec, 0), fmt(r.p50Ms, 2), fmt(r.p99Ms, 2), r.requests,
      perHit(spent.processes[0], r.requests), perHit(spent.postgres, r.requests)]);
    if (statements) statementTables.push(`${loop.label}:\n${statsTable(await statements.top(12), 'hit', r.requests)}`);
  }

  const counts = await sql<Record<string, string>>`
    SELECT l.opens_count::text AS opens, l.clicks_count::text AS clicks,
           (SELECT count(*) FROM events WHERE team_id = l.team_id AND name IN ('email.opened', 'email.clicked'))::text AS events,
           (SELECT count(*) FROM graphile_worker._private_jobs)::text AS jobs,
           (SELECT count(*) FROM tracking_hits WHERE email_send_log_id = l.id)::text AS stored_hits,
           to_jsonb(l) AS row
    FROM email_send_log l WHERE l.id = ${sendId}`.execute(db);
  const c = counts.rows[0]!;
  // Older schemas have no raw-hit columns.
  const row = c.row as unknown as { open_hits_count?: number; click_hits_count?: number };
  const raw = 'open_hits_count' in row ? `${row.open_hits_count} opens, ${row.click_hits_count} clicks` : '(no raw-hit columns)';

  process.stdout.write(`\nTracking replay loop (one message, ${connections} connections, ${duration} s per loop)\n`);
  process.stdout.write(
    table(['loop', 'hits/s', 'p50 ms', 'p99 ms', 'hits', 'app CPU µs/hit', 'PostgreSQL CPU µs/hit'], results,
      ['left', 'right', 'right', 'right', 'right', 'right', 'right']) + '\n',
  );
  for (const t of statementTables) process.stdout.write(`\n${t}\n`);
  process.stdout.write(
    `counted: opens ${c.opens}, clicks ${c.clicks}; events ${c.events}; process_events jobs ${c.jobs}; ` +
      `stored hit rows ${c.stored_hits}; raw hits ${raw}\n`,
  );
}
