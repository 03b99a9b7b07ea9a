// End to end, as a recipient and a webhook consumer see it: a real SMTP sink
// (smtp-server), a real webhook receiver (node:http) and the webhook
// dispatcher, all on 127.0.0.1. Upsert → e-mail at the sink → pixel, click and
// one-click unsubscribe through the public tracking URLs in that e-mail →
// webhooks at the receiver. The worker runs as graphile-worker runOnce drains
// (fixtures.drain), so the test waits for work, never for wall-clock windows:
// the bot window is left by moving email_send_log.sent_at back in SQL.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { closeTransports } from '../../src/mail/send.ts';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { BROWSER_UA, pathOf } from '../tracking/fixtures.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';
import { contactByEmail, createCampaign, drain, eventsNamed, sendLog, setup } from './fixtures.ts';
import { decodeHeader, parseMessage, startCaptureSink, type CaptureSink } from './sink.ts';

const config = testConfig({ allowedPrivateTargets: ['127.0.0.1'] });
const BOT_UA = 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)';
const HREF = /href="([^"]+)"/g;
const unescapeAttr = (s: string) => s.replace(/&amp;/g, '&').replace(/&quot;/g, '"');

describe('end to end: upsert → e-mail at the SMTP sink → tracking → webhooks at the receiver', () => {
  let t: TestApp;
  let sink: CaptureSink;
  let receiver: Receiver;
  let dispatcher: WebhookDispatcher;
  before(async () => {
    t = await buildTestApp({ config });
    sink = await startCaptureSink();
    receiver = await startReceiver();
    dispatcher = new WebhookDispatcher({ db: t.database.db, pool: t.database.pool, config, log: pino({ level: 'silent' }) });
    await dispatcher.start();
  });
  after(async () => {
    await dispatcher.stop();
    closeTransports();
    await Promise.all([sink.close(), receiver.close()]);
    await t.close();
  });

  /** Runs the worker until idle, then waits for the webhook with this event name (the dispatcher runs on its own). */
  async function webhook(event: string, n = 1) {
    await drain(t, { config });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const got = receiver.received.filter((r) => r.body.event === event);
      if (got.length >= n) return got[n - 1]!.body as { event: string; team_id: string; payload: Record<string, any> };
      if (Date.now() > deadline) throw new Error(`no ${event} webhook (#${n}); got ${receiver.received.map((r) => r.body.event).join(', ')}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  const get = (url: string, ua: string) => t.app.inject({ method: 'GET', url: pathOf(url), headers: { 'user-agent': ua } });

  test('the whole path, and no further e-mail once the recipient has unsubscribed', async () => {
    const s = await setup(t, sink.port, {
      subject: 'Hi {{ contact.first_name }}, {{ campaign.name }}',
      content:
        '<html><body><p>Hello {{ contact.first_name }} {{ contact.last_name }}</p>' +
        '<a href="https://example.com/pricing?plan=pro&amp;ref=mail">Pricing</a></body></html>',
      alt_content: 'Hello {{ contact.first_name }}: https://example.com/pricing',
    });
    const hook = await s.a.post('/webhooks', {
      url: receiver.url,
      events: ['email.sent', 'email.opened', 'email.bot.opened', 'email.clicked', 'email.contact.unsubscribed'],
    });
    assert.equal(hook.statusCode, 201, hook.body);
    const { id: campaignId } = await createCampaign(s.a, {
      name: 'Spring', template_ids: [s.templateId], mail_account_ids: [s.accountId],
      event_triggered_send: { contact_cooldown_interval: 0 },
    });

    // Upsert → the campaign's e-mail at the sink, rendered, both parts, RFC 8058 headers.
    const before = sink.messages.length;
    const up = await s.a.post('/email/contacts/upsert', { email: 'grace@example.com', first_name: 'Grace', last_name: 'Hopper' });
    assert.equal(up.statusCode, 200, up.body);
    await drain(t, { config });
    await sink.waitFor(before + 1);
    const msg = sink.messages[before]!;
    assert.deepEqual(msg.to, ['grace@example.com']);
    const m = parseMessage(msg.raw);
    assert.equal(decodeHeader(m.headers.get('subject')!), 'Hi Grace, Spring');
    assert.match(m.html, /<p>Hello Grace Hopper<\/p>/);
    assert.match(m.text, /^Hello Grace: /);
    const unsubscribeUrl = /^<(.+)>$/.exec(m.headers.get('list-unsubscribe') ?? '')?.[1];
    assert.ok(unsubscribeUrl?.startsWith(`${config.publicUrl}/u/`), 'List-Unsubscribe is our signed URL');
    assert.equal(m.headers.get('list-unsubscribe-post'), 'List-Unsubscribe=One-Click');

    // Tracked link (text part too) and pixel, taken from the message as a mail client would.
    const hrefs = [...m.html.matchAll(HREF)].map((x) => unescapeAttr(x[1]!));
    const click = hrefs.find((h) => h.includes('/t/c/'));
    assert.ok(click, 'the link goes through the click redirect');
    assert.ok(!hrefs.includes('https://example.com/pricing?plan=pro&ref=mail'), 'no untracked copy');
    assert.match(m.text, new RegExp(`${config.publicUrl}/t/c/`), 'the text part is tracked too');
    const pixel = /<img src="([^"]+\/t\/o\/[^"]+)"/.exec(m.html)?.[1];
    assert.ok(pixel, 'open pixel');

    const [log] = await sendLog(t, s.teamId);
    assert.equal(log!.status, 'sent');
    assert.equal(m.headers.get('message-id'), `<${log!.message_id}>`);
    const contact = await contactByEmail(t, s.teamId, 'grace@example.com');

    const sent = await webhook('email.sent');
    assert.equal(sent.team_id, s.teamId);
    assert.equal(sent.payload.email_send_log_id, log!.id);
    assert.equal(sent.payload.contact_id, contact.id);
    assert.equal(sent.payload.campaign_id, campaignId);
    assert.equal(sent.payload.subject, 'Hi Grace, Spring');

    // Within the bot window, even a browser's fetch is a machine on the delivery path.
    assert.equal((await get(pixel!, BROWSER_UA)).statusCode, 200);
    const early = await webhook('email.bot.opened');
    assert.ok(early.payload.decision.reasons.includes('immediate_after_send'), JSON.stringify(early.payload.decision));

    // Later than the window: move sent_at back rather than sleep.
    await t.database.pool.query(`UPDATE email_send_log SET sent_at = sent_at - interval '1 hour' WHERE id = $1`, [log!.id]);
    // The early bot open too: a link counts once per verdict and hour, and the crawler below comes an hour later.
    await t.database.pool.query(`UPDATE tracking_counted SET counted_at = counted_at - interval '1 hour' WHERE email_send_log_id = $1`, [log!.id]);
    const opened = await get(pixel!, BROWSER_UA);
    assert.equal(opened.statusCode, 200);
    assert.equal(opened.headers['content-type'], 'image/gif');
    const open = await webhook('email.opened');
    assert.equal(open.payload.email_send_log_id, log!.id);
    assert.equal(open.payload.user_agent, BROWSER_UA);
    assert.equal(open.payload.decision, undefined, 'a person’s open carries no bot decision');

    // A crawler's fetch of the same pixel, an hour later too: a bot open.
    await get(pixel!, BOT_UA);
    const botOpen = await webhook('email.bot.opened', 2);
    assert.equal(botOpen.payload.decision.is_bot, true);
    assert.ok(botOpen.payload.decision.reasons.includes('bot_user_agent'), JSON.stringify(botOpen.payload.decision));
    assert.equal((await contactByEmail(t, s.teamId, 'grace@example.com')).opens_count, 1, 'only the person counted');

    // Click: 302 to exactly the original URL, email.clicked.
    const clicked = await get(click!, BROWSER_UA);
    assert.equal(clicked.statusCode, 302);
    assert.equal(clicked.headers.location, 'https://example.com/pricing?plan=pro&ref=mail');
    const clickHook = await webhook('email.clicked');
    assert.equal(clickHook.payload.url, 'https://example.com/pricing?plan=pro&ref=mail');
    assert.equal(clickHook.payload.email_send_log_id, log!.id);

    // A tampered token: 404, never a redirect, nothing recorded.
    const u = new URL(click!);
    const tamperedTarget = new URL(click!);
    tamperedTarget.searchParams.set('u', 'https://evil.example/phish');
    const sig = u.pathname.split('/').pop()!;
    const tamperedSig = new URL(click!);
    tamperedSig.pathname = u.pathname.replace(/[^/]+$/, (sig[0] === 'A' ? 'B' : 'A') + sig.slice(1));
    for (const bad of [tamperedTarget.href, tamperedSig.href]) {
      const res = await get(bad, BROWSER_UA);
      assert.equal(res.statusCode, 404, bad);
      assert.equal(res.headers.location, undefined);
    }
    assert.equal((await eventsNamed(t, s.teamId, 'email.clicked')).length, 1);

    // One-click unsubscribe from the List-Unsubscribe header (RFC 8058).
    const unsub = await t.app.inject({
      method: 'POST',
      url: pathOf(unsubscribeUrl!),
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': BROWSER_UA },
      payload: 'List-Unsubscribe=One-Click',
    });
    assert.equal(unsub.statusCode, 200);
    const after = await contactByEmail(t, s.teamId, 'grace@example.com');
    assert.equal(after.status, 'unsubscribed');
    assert.ok(after.unsubscribed_at);
    const listed = (await s.a.get('/email/contacts/unsubscribes')).json();
    assert.deepEqual(listed.contacts.map((c: { email: string }) => c.email), ['grace@example.com']);
    const gone = await webhook('email.contact.unsubscribed');
    assert.equal(gone.payload.contact_id, contact.id);
    assert.equal(gone.payload.unsubscribe_method, 'one_click');

    // A further trigger decides "skip: unsubscribed" and sends nothing.
    const ev = await s.a.post('/email/events', { event_name: 'contact.saved', email: 'grace@example.com' });
    assert.equal(ev.statusCode, 202, ev.body);
    await drain(t, { config });
    const decisions = (await s.a.get(`/email/events/${ev.json().event_id}/decisions`)).json();
    assert.equal(decisions.processed, true);
    assert.deepEqual(decisions.decisions.map((d: any) => [d.campaign_id, d.decision, d.reason]), [[campaignId, 'skip', 'unsubscribed']]);
    assert.equal(sink.messages.length, before + 1, 'no second e-mail');
    assert.equal((await sendLog(t, s.teamId)).length, 1);
    assert.equal(receiver.received.filter((r) => r.body.event === 'email.sent').length, 1);
  });
});
