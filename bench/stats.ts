// `npm run bench -- stats [--stats-messages <n>] [--screenshots]`: the
// statistics at scale. One campaign with N messages (default 1,000,000) over
// 30 days on two mail accounts, beside a transactional stream and another
// team; the buckets hold the campaign's history, and 20,000 unfolded deltas
// (a busy minute) sit in the delta table. Timed over HTTP on the real app:
// the stats routes (median and p99 of 50 calls each), against the baseline
// the buckets replace: the same day-by-day counts by raw SQL over the message
// log (the campaign's index range). Then the fold of the deltas, and the
// dashboard's campaign page and overview at this size. With --screenshots
// (and Chromium at /usr/bin/chromium), full-page screenshots of the campaign
// page, the overview and a contact's timeline go to docs/screenshots/.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { createUser } from '../src/dashboard/users.ts';
import { foldStats } from '../src/stats/fold.ts';
import { createEventCampaign } from '../src/campaigns/create.ts';
import type { BenchOptions } from './lib/types.ts';
import { dashboardSession } from './lib/dashboard-session.ts';

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))]!;

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags['stats-messages'] ?? 1_000_000;
  const pgs = await opts.postgres();
  const d = await pgs.createDatabase();
  opts.defer(() => d.drop());
  const team = await createTeam(d.db, 'Acme Outdoor');
  const other = await createTeam(d.db, 'other');
  const { key } = await createApiKey(d.db, team.id, 'bench');
  const accounts: string[] = [];
  for (const email of ['news@acme.example', 'hello@acme.example']) {
    const a = await d.db.insertInto('mail_accounts').values({
      team_id: team.id, host: '127.0.0.1', port: 2525, security: 'none', from_email: email, daily_limit: 1_000_000, status: 'active',
    } as any).returning('id').executeTakeFirstOrThrow();
    accounts.push(a.id);
  }
  const tpl = await d.db.insertInto('templates').values({ team_id: team.id, name: 'Spring newsletter', subject: 'Spring', content: '<p>Hi</p>', content_type: 'html' } as any)
    .returning('id').executeTakeFirstOrThrow();
  const campaign = await createEventCampaign(d.db, team.id, { name: 'Spring newsletter', events: ['contact.saved'], template_ids: [tpl.id], mail_account_ids: accounts } as any);

  opts.log(`inserting ${n} campaign messages over 30 days (+${n / 10} transactional, +${n / 10} of another team)`);
  let t0 = performance.now();
  const fill = (teamId: string, count: number, campaignId: string | null, source: string, prefix: string) => d.pool.query(
    `INSERT INTO email_send_log (team_id, campaign_id, mail_account_id, email, status, source, queued_at, created_at, updated_at, sent_at,
                                 bounced_at, delivered_at, first_opened_at, opens_count, first_clicked_at, clicks_count)
     SELECT $1, $3, (ARRAY[$5::uuid, $6::uuid])[1 + g % 2], $4 || g || '@d' || (g % 97) || '.example',
            CASE WHEN g % 50 = 0 THEN 'bounced_hard' WHEN g % 77 = 0 THEN 'bounced_soft' WHEN g % 3 = 0 THEN 'delivered' ELSE 'sent' END,
            $7, t, t, t, t,
            CASE WHEN g % 50 = 0 OR g % 77 = 0 THEN t END, CASE WHEN g % 3 = 0 AND g % 50 <> 0 AND g % 77 <> 0 THEN t + interval '1 minute' END,
            CASE WHEN g % 4 = 0 THEN t + interval '2 hours' END, (g % 4 = 0)::int,
            CASE WHEN g % 19 = 0 THEN t + interval '3 hours' END, (g % 19 = 0)::int
       FROM generate_series(1, $2::int) g, LATERAL (SELECT now() - make_interval(secs => (g::float8 / $2) * 30 * 86400) AS t) x`,
    [teamId, count, campaignId, prefix, accounts[0], accounts[1], source]);
  await fill(team.id, n, campaign.id, 'campaign', 'c');
  await fill(team.id, Math.floor(n / 10), null, 'transactional', 't');
  await fill(other.id, Math.floor(n / 10), null, 'transactional', 'o');
  opts.log(`  ${Math.round(performance.now() - t0)} ms; building the buckets from it`);
  // The buckets as the writers would have left them: sends, bounces, deliveries, opens and clicks of people.
  t0 = performance.now();
  await d.pool.query(`
    WITH f AS (
      SELECT team_id, source, campaign_id, mail_account_id, sent_at AS at, 1 AS sent, 0 AS bh, 0 AS bs, 0 AS dl, 0 AS oh, 0 AS ch FROM email_send_log
      UNION ALL SELECT team_id, source, campaign_id, mail_account_id, bounced_at, 0, (status = 'bounced_hard')::int, (status = 'bounced_soft')::int, 0, 0, 0 FROM email_send_log WHERE bounced_at IS NOT NULL
      UNION ALL SELECT team_id, source, campaign_id, mail_account_id, delivered_at, 0, 0, 0, 1, 0, 0 FROM email_send_log WHERE delivered_at IS NOT NULL
      UNION ALL SELECT team_id, source, campaign_id, mail_account_id, first_opened_at, 0, 0, 0, 0, 1, 0 FROM email_send_log WHERE first_opened_at IS NOT NULL
      UNION ALL SELECT team_id, source, campaign_id, mail_account_id, first_clicked_at, 0, 0, 0, 0, 0, 1 FROM email_send_log WHERE first_clicked_at IS NOT NULL
    )
    INSERT INTO stats_buckets (team_id, source, campaign_id, mail_account_id, bucket, sent, bounced_hard, bounced_soft, delivered, opened_human, clicked_human)
    SELECT team_id, source, campaign_id, mail_account_id, date_bin('15 minutes', at, TIMESTAMPTZ '2000-01-01 00:00:00+00'),
           sum(sent), sum(bh), sum(bs), sum(dl), sum(oh), sum(ch)
      FROM f WHERE at IS NOT NULL GROUP BY 1, 2, 3, 4, 5`);
  // A busy minute not yet folded: 20,000 deltas of this team.
  await d.pool.query(`
    INSERT INTO stats_deltas (team_id, source, campaign_id, mail_account_id, bucket, sent, opened_human, opened_bot)
    SELECT $1, 'campaign', $2, (ARRAY[$3::uuid, $4::uuid])[1 + g % 2], date_bin('15 minutes', now(), TIMESTAMPTZ '2000-01-01 00:00:00+00'), 1, (g % 4 = 0)::int, (g % 9 = 0)::int
      FROM generate_series(1, 20000) g`, [team.id, campaign.id, accounts[0], accounts[1]]);
  await d.pool.query('VACUUM ANALYZE email_send_log');
  await d.pool.query('VACUUM ANALYZE stats_buckets');
  await d.pool.query('VACUUM ANALYZE stats_deltas');
  const buckets = (await d.pool.query('SELECT count(*)::int AS n FROM stats_buckets')).rows[0].n;
  opts.log(`  ${Math.round(performance.now() - t0)} ms; ${buckets} bucket rows`);

  const config = loadConfig({ DATABASE_URL: d.url, APP_SECRET: d.appSecret, PUBLIC_URL: 'https://plover.bench.test', LOG_LEVEL: 'silent', RATE_LIMIT_PER_MINUTE: '1000000' });
  const app = await buildApp({ config, pool: d.pool, db: d.db });
  await app.listen({ port: 0, host: '127.0.0.1' });
  opts.defer(() => app.close());
  const origin = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;

  const time = async (label: string, fn: () => Promise<unknown>, runs = 50) => {
    await fn();
    const xs: number[] = [];
    for (let i = 0; i < runs; i++) {
      const s = performance.now();
      await fn();
      xs.push(performance.now() - s);
    }
    console.log(`  ${label.padEnd(52)} median ${pct(xs, 50).toFixed(1).padStart(7)} ms  p99 ${pct(xs, 99).toFixed(1).padStart(7)} ms`);
    return pct(xs, 50);
  };
  const get = async (path: string): Promise<any> => {
    const res = await fetch(origin + path, { headers: { 'x-api-key': key } });
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  console.log(`stats, a campaign of ${n} messages over 30 days (${buckets} bucket rows, 20000 unfolded deltas), sequential HTTP calls`);
  const totals = (await get(`/public/v1/email/campaigns/${campaign.id}/stats`)).stats.totals;
  console.log(`  totals: ${JSON.stringify(totals)}`);
  const route = await time('GET campaign stats, 30 days by day', () => get(`/public/v1/email/campaigns/${campaign.id}/stats`));
  await time('GET campaign stats, 7 days by hour', () => get(`/public/v1/email/campaigns/${campaign.id}/stats?interval=hour&from=${new Date(Date.now() - 7 * 86_400_000).toISOString()}`));
  await time('GET campaign stats, 90 days by day, tz Europe/Paris', () => get(`/public/v1/email/campaigns/${campaign.id}/stats?tz=Europe/Paris&from=${new Date(Date.now() - 90 * 86_400_000).toISOString()}`));
  await time('GET mail-account stats, 30 days by day', () => get(`/public/v1/email/mail-accounts/${accounts[0]}/stats`));
  await time('GET transactional stats, 30 days by day', () => get('/public/v1/email/emails/stats'));
  const ping = await time('baseline: GET /public/v1/ping (the same app)', () => get('/public/v1/ping'));
  const raw = await time('baseline: raw SQL, day counts over the message log', () => d.pool.query(`
    SELECT date_trunc('day', sent_at) AS day, count(*) AS sent, count(*) FILTER (WHERE status = 'bounced_hard') AS hard,
           count(*) FILTER (WHERE first_opened_at IS NOT NULL) AS opened
      FROM email_send_log WHERE campaign_id = $1 AND team_id = $2 AND sent_at > now() - interval '30 days' GROUP BY 1`, [campaign.id, team.id]), 10);
  console.log(`  ratio: stats route / ping ${(route / ping).toFixed(1)}x; raw log scan / stats route ${(raw / route).toFixed(1)}x`);

  t0 = performance.now();
  const folded = await foldStats(d.db);
  console.log(`  fold: ${folded} deltas in ${Math.round(performance.now() - t0)} ms`);
  await time('GET campaign stats after the fold, 30 days by day', () => get(`/public/v1/email/campaigns/${campaign.id}/stats`));

  const userEmail = 'owner@acme.example';
  const password = 'correct horse battery';
  await createUser(d.db, team.id, userEmail, password);
  // The dashboard pages that read this campaign's numbers, server time of the whole page.
  const session = await dashboardSession(origin, userEmail, password);
  if (!session) throw new Error('dashboard sign-in failed');
  const page_ = async (path: string) => {
    const res = await fetch(origin + path, { headers: { cookie: session } });
    if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
    await res.arrayBuffer();
  };
  await time('dashboard /campaigns (counts of each campaign)', () => page_('/campaigns'), 20);
  await time('dashboard /campaigns/{id} (counts, panel, messages)', () => page_(`/campaigns/${campaign.id}`), 20);
  await time('dashboard / (overview)', () => page_('/'), 20);
  if (!opts.switches.screenshots) return;
  const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!existsSync(chromium)) {
    console.log(`  screenshots skipped: no Chromium at ${chromium}`);
    return;
  }
  const { chromium: pw } = await import('playwright-core');
  const browser = await pw.launch({ executablePath: chromium, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  opts.defer(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${origin}/sign-in`);
  await page.getByLabel('E-mail').fill(userEmail);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: /Sign in/ }).click();
  await page.waitForURL(`${origin}/`);
  const dir = join(import.meta.dirname, '..', 'docs', 'screenshots');
  mkdirSync(dir, { recursive: true });
  const shot = async (path: string, file: string, ready?: string) => {
    const s = performance.now();
    await page.goto(origin + path);
    if (ready) await page.waitForFunction(ready);
    console.log(`  page ${path.padEnd(48)} ${Math.round(performance.now() - s)} ms (loaded and drawn)`);
    await page.screenshot({ path: join(dir, file), fullPage: true });
  };
  await shot(`/campaigns/${campaign.id}`, 'campaign-1m.png', '(window.ploverCharts || {}).rates');
  await shot('/', 'overview-1m.png', '(window.ploverCharts || {}).rates');
  const contact = await d.db.insertInto('contacts').values({ team_id: team.id, email: 'c4@d4.example', first_name: 'Ada' } as any).returning('id').executeTakeFirstOrThrow();
  await sql`UPDATE email_send_log SET contact_id = ${contact.id}::uuid WHERE team_id = ${team.id}::uuid AND email = 'c4@d4.example'`.execute(d.db);
  await shot(`/contacts/${contact.id}/timeline`, 'timeline-1m.png');
  console.log(`  screenshots in ${dir}`);
}
