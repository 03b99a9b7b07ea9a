// The statistics panels in Chromium: the campaign page draws its charts from
// the same numbers the stats API answers (the drawn data points are compared
// with the API's series, not only that a canvas exists), the table view and
// the CSV download carry the same numbers, the rate chart carries the
// providers' thresholds, and a mail account in `warning` shows the health
// warning on the overview. Screenshots in test-results/.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import type { Browser, Page } from 'playwright-core';
import { recordAttempts, type AttemptResult } from '../../src/webhooks/deliveries.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { browserSkipReason, launch, SCREENSHOTS } from './browser.ts';
import { makeUserTeam, PASSWORD } from './session.ts';

const skip = browserSkipReason();
if (skip) console.log(`# ${skip}`);

let t: TestApp;
let browser: Browser;
let page: Page;
let base: string;

before(async () => {
  if (skip) return;
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
});
after(async () => {
  await browser?.close();
  await t?.close();
});

test('campaign page: charts drawn from the API\'s numbers, table and CSV equal; the overview warns about an unhealthy account', { skip, timeout: 120_000 }, async () => {
  const me = await makeUserTeam(t.database.db, 'Stats browser team');
  const api = async (method: string, url: string, payload?: unknown) => {
    const res = await t.app.inject({ method: method as 'GET', url: `/public/v1${url}`, headers: { 'x-api-key': me.key }, ...(payload ? { payload } : {}) });
    assert.ok(res.statusCode < 300, res.body);
    return res.json();
  };
  const account = await t.database.db.insertInto('mail_accounts').values({
    team_id: me.teamId, host: '127.0.0.1', port: 2525, security: 'none', from_email: 'news@stats.example.com', daily_limit: 1000, status: 'active',
  } as any).returning('id').executeTakeFirstOrThrow();
  const tpl = await api('POST', '/email/templates', { name: 'T', content_type: 'html', subject: 'Hi', content: '<p>Hi</p>' });
  const campaign = (await api('POST', '/email/campaigns', { name: 'Spring sale', events: ['lead.created'], template_ids: [tpl.template.id], mail_account_ids: [account.id] })).campaign;

  // Twenty days of folded buckets with varied numbers, and today's unfolded deltas.
  await sql`
    INSERT INTO stats_buckets (team_id, source, campaign_id, mail_account_id, bucket, sent, delivered, bounced_hard, bounced_soft,
                               opened_human, opened_bot, clicked_human, clicked_bot, complained, unsubscribed)
    SELECT ${me.teamId}::uuid, 'campaign', ${campaign.id}::uuid, ${account.id}::uuid,
           date_bin('15 minutes', now() - make_interval(days => d, hours => 3), TIMESTAMPTZ '2000-01-01 00:00:00+00'),
           100 + d * 7, 80 + d * 5, d % 4, d % 3, 30 + d, 10 + (d * 3) % 7, 5 + d % 5, d % 2, CASE WHEN d % 6 = 0 THEN 1 ELSE 0 END, d % 2
      FROM generate_series(1, 20) d`.execute(t.database.db);
  await sql`
    INSERT INTO stats_deltas (team_id, source, campaign_id, mail_account_id, bucket, sent, opened_human, opened_bot)
    VALUES (${me.teamId}::uuid, 'campaign', ${campaign.id}::uuid, ${account.id}::uuid,
            date_bin('15 minutes', now(), TIMESTAMPTZ '2000-01-01 00:00:00+00'), 42, 7, 3)`.execute(t.database.db);
  await sql`UPDATE mail_accounts SET health_state = 'warning' WHERE id = ${account.id}::uuid`.execute(t.database.db);

  await page.goto(`${base}/sign-in`);
  await page.getByLabel('E-mail').fill(me.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: /Sign in/ }).click();
  await page.waitForURL(`${base}/`);

  await page.goto(`${base}/campaigns/${campaign.id}?period=30d`);
  await page.waitForFunction(() => (globalThis as any).ploverCharts?.rates);
  const drawn = await page.evaluate(() => {
    const c = (globalThis as any).ploverCharts;
    return { volume: c.volume.data, engagement: c.engagement.data, rates: c.rates.data, labels: c.rates.series.map((s: any) => s.label) };
  });
  const xs: number[] = drawn.volume[0];
  assert.equal(xs.length, await page.evaluate(() => JSON.parse((globalThis as any).document.getElementById("stats-data").textContent).series.length));
  // The API over the same days.
  const from = new Date(xs[0]! * 1000).toISOString();
  const to = new Date((xs.at(-1)! + 86_400) * 1000).toISOString();
  const stats = (await api('GET', `/email/campaigns/${campaign.id}/stats?from=${from}&to=${to}&interval=day`)).stats;
  const col = (k: string) => stats.series.map((p: any) => p[k]);
  assert.deepEqual(xs, stats.series.map((p: any) => Date.parse(p.at) / 1000));
  assert.deepEqual(drawn.volume.slice(1), [col('sent'), col('delivered'), stats.series.map((p: any) => p.bounced_hard + p.bounced_soft)]);
  assert.deepEqual(drawn.engagement.slice(1), [col('opened_human'), col('opened_bot'), col('clicked_human'), col('clicked_bot')]);
  // Rates per day as the glossary defines them; the thresholds drawn as flat lines.
  const bounceRates = stats.series.map((p: any) => (p.sent > 0 ? Math.round(((p.bounced_hard + p.bounced_soft) * 10000) / p.sent) / 100 : null));
  assert.deepEqual(drawn.rates[1], bounceRates);
  assert.ok(drawn.rates[3].every((v: number) => v === 2) && drawn.rates[4].every((v: number) => v === 0.3));
  assert.deepEqual(drawn.labels.slice(3), ['bounce limit 2 %', 'complaint limit 0.3 %']);
  assert.equal(stats.totals.sent, 20 * 100 + 7 * 210 + 42, 'the API counts buckets and deltas');
  assert.equal(await page.locator('[data-total="sent"]').innerText(), String(stats.totals.sent));
  assert.equal(await page.locator('[data-chart] canvas').count(), 3);

  // The table view: every non-zero day, the same numbers.
  await page.getByText('Table', { exact: true }).click();
  const table = await page.locator('.stats-table tbody tr').evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent)));
  const nonZero = stats.series.filter((p: any) => Object.entries(p).some(([k, v]) => k !== 'at' && v !== 0)).reverse();
  assert.equal(table.length, nonZero.length);
  assert.deepEqual(table.map((r) => r.slice(1).map(Number)), nonZero.map((p: any) => Object.entries(p).filter(([k]) => k !== 'at').map(([, v]) => v)));
  await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-campaign-stats.png'), fullPage: true });

  // The CSV download: the same series.
  const href = await page.getByRole('link', { name: 'Download CSV' }).getAttribute('href');
  const csv = await page.evaluate(async (url) => (await fetch(url!)).text(), href);
  const [header, ...lines] = csv.trim().split('\r\n');
  assert.equal(header, ['at', ...Object.keys(stats.totals)].join(','));
  assert.deepEqual(lines.map((l) => l.split(',').slice(1).map(Number)), stats.series.map((p: any) => Object.keys(stats.totals).map((k) => p[k])));
  assert.deepEqual(lines.map((l) => Date.parse(l.split(',')[0]!) / 1000), xs);

  // The overview: the warning about the account, and the team's charts.
  await page.goto(`${base}/`);
  const warning = page.locator('#account-health');
  assert.match(await warning.innerText(), /news@stats\.example\.com is warning/);
  await page.waitForFunction(() => (globalThis as any).ploverCharts?.volume);
  const teamSent = await page.evaluate(() => ((globalThis as any).ploverCharts.volume.data[1] as number[]).reduce((a, b) => a + b, 0));
  assert.equal(teamSent, stats.totals.sent, 'the team is this one campaign');
  await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-overview-stats.png'), fullPage: true });

  // The account's own page.
  await page.goto(`${base}/mail-accounts/${account.id}/stats`);
  assert.match(await page.locator('#account-health').innerText(), /warning/);
  // Transactional mail's page: its own numbers (none here: this team sent campaign mail only), charts drawn.
  await sql`INSERT INTO stats_deltas (team_id, source, mail_account_id, bucket, sent, bounced_hard)
            VALUES (${me.teamId}::uuid, 'transactional', ${account.id}::uuid, date_bin('15 minutes', now(), TIMESTAMPTZ '2000-01-01 00:00:00+00'), 9, 1)`.execute(t.database.db);
  await page.goto(`${base}/emails`);
  await page.getByRole('link', { name: 'Statistics' }).click();
  await page.waitForURL(`${base}/emails/stats`);
  await page.waitForFunction(() => (globalThis as any).ploverCharts?.volume);
  const tx = await page.evaluate(() => (globalThis as any).ploverCharts.volume.data as number[][]);
  assert.deepEqual([tx[1]!.reduce((a, b) => a + b, 0), tx[3]!.reduce((a, b) => a + b, 0)], [9, 1], 'sent 9, bounced 1: transactional only');
});

test('webhook page: attempts and latency charts from the recorded attempts, table and CSV', { skip, timeout: 120_000 }, async () => {
  const me = await makeUserTeam(t.database.db, 'Webhook chart team');
  const hook = await t.app.inject({
    method: 'POST', url: '/public/v1/webhooks', headers: { 'x-api-key': me.key },
    payload: { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] },
  });
  assert.equal(hook.statusCode, 201, hook.body);
  const webhookId = hook.json().webhook.id;
  // Three deliveries now, recorded as the dispatcher records them: two answered 200 (100 and 300 ms), one 500 (900 ms)
  // after a failed attempt without answer (50 ms).
  const lease = new Date(Date.now() + 60_000);
  const deliveries = async (webhook: string, n: number) => (await sql<{ id: string }>`
    INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, status, attempts, locked_until)
    SELECT gen_random_uuid(), team_id, id, 'email.sent', '{}', 'pending', 0, ${lease}::timestamptz FROM webhooks, generate_series(1, ${n})
     WHERE id = ${webhook}::uuid RETURNING id`.execute(t.database.db)).rows.map((r) => r.id);
  const attempt = (id: string, webhook: string, code: number | null, ms: number): AttemptResult => ({
    id, webhook_id: webhook, lease, at: new Date(), status: code === 200 ? 'success' : 'failed', response_code: code, response_body: null,
    error: code === null ? 'timeout' : null, duration_ms: ms, next_attempt_at: null, gone: false,
  });
  const [a, b, c] = await deliveries(webhookId, 3);
  await recordAttempts(t.database.db, [attempt(a!, webhookId, 200, 100), attempt(b!, webhookId, 200, 300), attempt(c!, webhookId, null, 50)]);
  await sql`UPDATE webhook_deliveries SET locked_until = ${lease}::timestamptz WHERE id = ${c!}::uuid`.execute(t.database.db);
  await recordAttempts(t.database.db, [attempt(c!, webhookId, 500, 900)]);
  // Another webhook's deliveries do not show.
  const other = await t.app.inject({
    method: 'POST', url: '/public/v1/webhooks', headers: { 'x-api-key': me.key },
    payload: { url: 'http://127.0.0.1:9/other', events: ['email.sent'] },
  });
  const otherId: string = other.json().webhook.id;
  const [o] = await deliveries(otherId, 1);
  await recordAttempts(t.database.db, [attempt(o!, otherId, 200, 5)]);
  // Durations 50, 100, 300, 900: median 200, 95th percentile 900 - 0.15 × 600 = 810, read from the latency histogram
  // (src/webhooks/stats.ts): within one bin, a factor 2^(1/8) on (1 + ms).
  const near = (got: number, exact: number) => Math.abs(got - exact) <= (2 ** (1 / 8) - 1) * (exact + 1);

  const ctx = await browser.newContext();
  const p = await ctx.newPage();
  await p.goto(`${base}/sign-in`);
  await p.getByLabel('E-mail').fill(me.email);
  await p.getByLabel('Password').fill(PASSWORD);
  await p.getByRole('button', { name: /Sign in/ }).click();
  await p.waitForURL(`${base}/`);
  await p.goto(`${base}/webhooks/${webhookId}`);
  await p.waitForFunction(() => (globalThis as any).ploverCharts?.latency);
  const drawn = await p.evaluate(() => ({ attempts: (globalThis as any).ploverCharts.attempts.data, latency: (globalThis as any).ploverCharts.latency.data }));
  const today = drawn.attempts[0].length - 1;
  assert.deepEqual([drawn.attempts[1][today], drawn.attempts[2][today]], [2, 2], 'succeeded 2, failed 2 (the timeout and the 500)');
  assert.equal(drawn.attempts[1].slice(0, today).reduce((a: number, b: number) => a + b, 0), 0, 'nothing on other days');
  assert.ok(near(drawn.latency[1][today], 200) && near(drawn.latency[2][today], 810), `latency drawn ${drawn.latency[1][today]}, ${drawn.latency[2][today]}`);
  const drawnLatency = [drawn.latency[1][today], drawn.latency[2][today]];
  await p.getByText('Table', { exact: true }).click();
  const row = await p.locator('.stats-table tbody tr').first().locator('td').allInnerTexts();
  assert.deepEqual(row.slice(1).map(Number), [4, 2, 2, ...drawnLatency], 'the table holds the drawn numbers');
  const href = await p.getByRole('link', { name: 'Download CSV' }).getAttribute('href');
  const csv = await p.evaluate(async (url) => (await fetch(url!)).text(), href);
  const lines = csv.trim().split('\r\n');
  assert.equal(lines[0], 'at,attempts,succeeded,failed,p50_ms,p95_ms');
  assert.deepEqual(lines.at(-1)!.split(',').slice(1), ['4', '2', '2', ...drawnLatency.map(String)], 'the CSV holds the drawn numbers');
  await p.screenshot({ path: join(SCREENSHOTS, 'dashboard-webhook-chart.png'), fullPage: true });
  await ctx.close();
});
