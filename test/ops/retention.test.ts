// Retention with a controlled clock: rows are backdated, then runRetention
// purges what is past each window and keeps the rest, never deleting leads,
// sales or decisions, never changing stored counters, and never breaking a
// link in a sent e-mail.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { runRetention, type RetentionOptions } from '../../src/ops/retention.ts';
import { DEFAULT_RENDER_LIMITS } from '../../src/lib/render-limits.ts';
import { renderMessage } from '../../src/templates/render-tasks.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { BROWSER_UA, insertSend, pathOf, testLinks } from '../tracking/fixtures.ts';

const DAY = 86_400_000;
const WINDOWS: RetentionOptions = { webhookDeliveriesDays: 30, eventsDays: 90, messagesDays: 90, trackingHitsDays: 90, batchSize: 1000, pauseMs: 0 };
const links = testLinks();

describe('retention', () => {
  let t: TestApp;
  const q = (text: string, values: unknown[] = []) => t.database.pool.query(text, values);
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  /** A team with a contact, a campaign and its send, a webhook, and an old and a recent copy of every kind of row. */
  async function world() {
    const { teamId } = await makeTeam(t.database.db);
    const old = await insertSend(t.database.db, teamId);
    const recent = await insertSend(t.database.db, teamId, { email: `new-${old.email}`, contactId: old.contactId });
    const { rows: [c] } = await q(`INSERT INTO campaigns (team_id, name, draft_data, trigger_events) VALUES ($1, 'c', '{}', '{contact.saved}') RETURNING id`, [teamId]);
    const { rows: [cs] } = await q(
      `INSERT INTO campaign_sends (team_id, campaign_id, campaign_type, send_data, send_progress)
       VALUES ($1, $2, 'event_triggered', '{}', '{"total_sent": 7, "total_bounced": 1}') RETURNING id`, [teamId, c.id]);
    await q(`UPDATE contacts SET sent_count = 12, opens_count = 5, clicks_count = 3, leads_count = 2, sales_count = 1 WHERE id = $1`, [old.contactId]);
    await q(`UPDATE email_send_log SET opens_count = 4, clicks_count = 2, campaign_id = $2 WHERE id = $1`, [old.id, c.id]);
    const ev = async (ageDays: number, processed = true) =>
      (await q(`INSERT INTO events (team_id, name, contact_id, idempotency_key, created_at, processed_at)
                VALUES ($1, 'lead.created', $2, $3, now() - $4 * interval '1 day', CASE WHEN $5 THEN now() END) RETURNING id`,
        [teamId, old.contactId, `k-${Math.random()}`, ageDays, processed])).rows[0].id as string;
    const oldEvent = await ev(91);
    const keptEvent = await ev(89);
    const unprocessedOld = await ev(200, false);
    // An old event whose message still waits to be sent (over a daily limit, or retrying).
    const eventOfWaiting = await ev(91);
    const waiting = await insertSend(t.database.db, teamId, { email: `waiting-${old.email}`, contactId: old.contactId, sentSecondsAgo: null });
    await q(`UPDATE email_send_log SET status = 'queued', event_id = $2, created_at = now() - interval '91 days' WHERE id = $1`, [waiting.id, eventOfWaiting]);
    await q(`INSERT INTO leads (team_id, contact_id, event_id, created_at) VALUES ($1, $2, $3, now() - interval '91 days')`, [teamId, old.contactId, oldEvent]);
    await q(`INSERT INTO sales (team_id, contact_id, event_id, amount, created_at) VALUES ($1, $2, $3, 10, now() - interval '91 days')`, [teamId, old.contactId, oldEvent]);
    await q(
      `INSERT INTO campaign_decisions (team_id, event_id, campaign_id, campaign_send_id, contact_id, decision, email_send_log_id, decided_at)
       VALUES ($1, $2, $3, $4, $5, 'send', $6, now() - interval '91 days')`, [teamId, oldEvent, c.id, cs.id, old.contactId, old.id]);
    await q(`UPDATE email_send_log SET event_id = $2, created_at = now() - interval '91 days' WHERE id = $1`, [old.id, oldEvent]);
    await q(`UPDATE email_send_log SET created_at = now() - interval '89 days' WHERE id = $1`, [recent.id]);
    const hit = async (send: string, ageDays: number) =>
      (await q(`INSERT INTO tracking_hits (team_id, email_send_log_id, contact_id, kind, method, is_bot, bot_score, created_at)
                VALUES ($1, $2, $3, 'open', 'GET', false, 0, now() - $4 * interval '1 day') RETURNING id`, [teamId, send, old.contactId, ageDays])).rows[0].id as string;
    const oldHitOfRecent = await hit(recent.id, 91);
    const keptHit = await hit(recent.id, 10);
    const { rows: [w] } = await q(`INSERT INTO webhooks (team_id, url, events, secret_enc) VALUES ($1, 'https://example.com/h', '{email.lead.created}', '\\x00') RETURNING id`, [teamId]);
    const delivery = async (status: string, ageDays: number, eventId: string | null = null) =>
      (await q(`INSERT INTO webhook_deliveries (id, team_id, webhook_id, event_id, event, status, created_at)
                VALUES (plover_uuid_v7(), $1, $2, $3, 'email.lead.created', $4, now() - $5 * interval '1 day') RETURNING id`,
        [teamId, w.id, eventId, status, ageDays])).rows[0].id as string;
    const deliveries = {
      oldSuccess: await delivery('success', 31, keptEvent),
      oldFailed: await delivery('failed', 31),
      oldPending: await delivery('pending', 31),
      recentSuccess: await delivery('success', 29),
    };
    return { teamId, old, recent, campaignId: c.id as string, campaignSendId: cs.id as string, oldEvent, keptEvent, unprocessedOld, eventOfWaiting, waiting, oldHitOfRecent, keptHit, deliveries };
  }

  const exists = async (table: string, id: string) => (await q(`SELECT 1 FROM ${table} WHERE id = $1`, [id])).rowCount === 1;

  test('each table is purged past its window and kept inside it; leads, sales and decisions stay, unlinked; counters unchanged', async () => {
    const w = await world();
    const counters = async () => ({
      contact: (await q('SELECT sent_count, opens_count, clicks_count, leads_count, sales_count FROM contacts WHERE id = $1', [w.old.contactId])).rows[0],
      send: (await q('SELECT send_progress FROM campaign_sends WHERE id = $1', [w.campaignSendId])).rows[0],
    });
    const before = await counters();
    await runRetention(t.database.db, WINDOWS);

    assert.equal(await exists('email_send_log', w.old.id), false, 'message 91 days old: purged');
    assert.equal(await exists('email_send_log', w.recent.id), true, 'message 89 days old: kept');
    assert.equal(await exists('tracking_hits', w.oldHitOfRecent), false, 'hit 91 days old: purged (its message is kept)');
    assert.equal(await exists('tracking_hits', w.keptHit), true);
    assert.equal(await exists('events', w.oldEvent), false, 'event 91 days old: purged');
    assert.equal(await exists('events', w.keptEvent), true, 'event 89 days old: kept');
    assert.equal(await exists('events', w.unprocessedOld), true, 'an event not yet processed is kept whatever its age');
    assert.equal(await exists('email_send_log', w.waiting.id), true, 'a message still to be sent is never purged');
    assert.equal(await exists('events', w.eventOfWaiting), true, 'the event of a message still to be sent is kept');
    assert.deepEqual((await q('SELECT event_id FROM email_send_log WHERE id = $1', [w.waiting.id])).rows, [{ event_id: w.eventOfWaiting }]);
    assert.equal(await exists('webhook_deliveries', w.deliveries.oldSuccess), false, 'delivered 31 days ago: purged');
    assert.equal(await exists('webhook_deliveries', w.deliveries.oldFailed), false);
    assert.equal(await exists('webhook_deliveries', w.deliveries.oldPending), true, 'a pending delivery is never purged');
    assert.equal(await exists('webhook_deliveries', w.deliveries.recentSuccess), true);

    for (const table of ['leads', 'sales']) {
      const { rows } = await q(`SELECT event_id FROM ${table} WHERE team_id = $1`, [w.teamId]);
      assert.deepEqual(rows, [{ event_id: null }], `${table}: kept, event_id null`);
    }
    const { rows: decisions } = await q('SELECT event_id, email_send_log_id, decision FROM campaign_decisions WHERE team_id = $1', [w.teamId]);
    assert.deepEqual(decisions, [{ event_id: null, email_send_log_id: null, decision: 'send' }]);
    assert.deepEqual(await counters(), before, 'stored counters are not recomputed from the remaining rows');
  });

  test('0 keeps a table forever; a window moves with the clock', async () => {
    const w = await world();
    await runRetention(t.database.db, { ...WINDOWS, messagesDays: 0, trackingHitsDays: 0, eventsDays: 0, webhookDeliveriesDays: 0 });
    assert.equal(await exists('email_send_log', w.old.id), true);
    assert.equal(await exists('events', w.oldEvent), true);
    // Two days later, the 89-day-old rows are past 90 days too.
    await runRetention(t.database.db, { ...WINDOWS, now: () => new Date(Date.now() + 2 * DAY) });
    assert.equal(await exists('email_send_log', w.recent.id), false);
    assert.equal(await exists('events', w.keptEvent), false);
  });

  test('links in a purged message still work: the unsubscribe link unsubscribes, the click link redirects', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const send = await insertSend(t.database.db, teamId);
    const config = testConfig();
    // The URL as the renderer puts it into the message (render input → pool thread).
    const rendered = renderMessage({
      sendLogId: send.id, contact: { email: send.email }, template: { subject: 's', content: '<p>x</p>', alt_content: '' },
      sendData: {}, event: null, campaign: null, links: { publicUrl: config.publicUrl, appSecret: config.appSecret! },
      recipient: { teamId, contactId: send.contactId, email: send.email }, limits: DEFAULT_RENDER_LIMITS,
    });
    assert.ok(rendered.ok);
    const unsubscribeUrl = rendered.unsubscribeUrl!;
    assert.ok(!unsubscribeUrl.includes(send.id), 'the link names the recipient, not the message');
    const target = 'https://shop.example.com/p?id=1';
    const clickUrl = links.clickUrl(send.id, target);
    await q(`UPDATE email_send_log SET created_at = now() - interval '91 days' WHERE id = $1`, [send.id]);
    await runRetention(t.database.db, WINDOWS);
    assert.equal(await exists('email_send_log', send.id), false);

    const click = await t.app.inject({ url: pathOf(clickUrl), headers: { 'user-agent': BROWSER_UA } });
    assert.equal(click.statusCode, 302);
    assert.equal(click.headers.location, target);
    const page = await t.app.inject({ url: pathOf(unsubscribeUrl) });
    assert.equal(page.statusCode, 200);
    assert.match(page.body, new RegExp(send.email.replace(/\./g, '\\.')));
    const res = await t.app.inject({ method: 'POST', url: pathOf(unsubscribeUrl), payload: 'List-Unsubscribe=One-Click', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    assert.equal(res.statusCode, 200, res.body);
    const { rows } = await q('SELECT status FROM contacts WHERE id = $1', [send.contactId]);
    assert.equal(rows[0].status, 'unsubscribed');
    // A tampered recipient link does nothing.
    const forged = unsubscribeUrl.replace(/\/[^/]+$/, '/AAAAAAAAAAAAAAAAAAAAAA');
    assert.equal((await t.app.inject({ method: 'POST', url: pathOf(forged) })).statusCode, 404);
  });

  test('an address link (no contact) unsubscribes the address in its team only', async () => {
    const a = await makeTeam(t.database.db);
    const b = await makeTeam(t.database.db);
    const email = `addr-${Math.random().toString(36).slice(2)}@example.com`;
    for (const team of [a, b]) await q(`INSERT INTO contacts (team_id, email) VALUES ($1, $2)`, [team.teamId, email]);
    const url = links.recipientUnsubscribeUrl({ teamId: a.teamId, contactId: null, email: email.toUpperCase() });
    assert.equal((await t.app.inject({ method: 'POST', url: pathOf(url) })).statusCode, 200);
    const { rows } = await q('SELECT team_id, status FROM contacts WHERE email = $1 ORDER BY team_id = $2 DESC', [email, a.teamId]);
    assert.deepEqual(rows.map((r) => r.status), ['unsubscribed', 'active']);
    // Moving the link to the other team breaks its signature.
    const moved = url.replace(a.teamId, b.teamId);
    assert.equal((await t.app.inject({ method: 'POST', url: pathOf(moved) })).statusCode, 404);
  });

  test('each statement deletes at most the batch size; a short batch ends the table', async () => {
    const { teamId } = await makeTeam(t.database.db);
    await q(`INSERT INTO events (team_id, name, payload, created_at, processed_at)
             SELECT $1, 'contact.saved', '{}', now() - interval '100 days', now() FROM generate_series(1, 2500)`, [teamId]);
    const report = await runRetention(t.database.db, { ...WINDOWS, batchSize: 1000, messagesDays: 0, trackingHitsDays: 0, webhookDeliveriesDays: 0 });
    const total = report.events.reduce((x, y) => x + y, 0);
    assert.ok(total >= 2500, `${total} deleted`);
    assert.ok(report.events.every((n) => n <= 1000), `rows per statement: ${report.events.join(', ')}`);
    assert.equal(report.events.at(-1)! < 1000, true, 'stopped on a short batch');
    assert.ok(report.events.length >= 3);
    assert.equal((await q('SELECT count(*)::int AS n FROM events WHERE team_id = $1', [teamId])).rows[0].n, 0);
  });
});
