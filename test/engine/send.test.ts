import assert from 'node:assert/strict';
import type { AddressInfo, Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { SMTPServer } from 'smtp-server';
import { renderedCharsHeld } from '../../src/mail/render-ahead.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { TrackingLinks } from '../../src/lib/tracking-links.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { watchSocketWrites } from '../lib/socket-writes.ts';
import { contactByEmail, createCampaign, drain, drainFailures, eventsNamed, sendLog, setup } from './fixtures.ts';
import { decodeHeader, parseMessage, startCaptureSink, type CaptureSink } from './sink.ts';

describe('sending: upsert → decision → SMTP → result', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    t = await buildTestApp();
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  test('the e-mail arrives personalised, with both parts, tracked links, pixel, honeypot and one-click unsubscribe', async () => {
    const s = await setup(t, sink.port, {
      subject: 'Hello {{ contact.first_name }} from {{ contact.country_code }}',
      content:
        '<html><body><p>Hi {{ contact.first_name }} ({{ contact.custom_str_1 }})</p>' +
        '{% if contact.tags contains "vip" %}<p>VIP</p>{% endif %}' +
        '<a href="https://example.com/offer?a=1&amp;b=2">Offer</a> <a href="mailto:help@example.com">Help</a>' +
        '<a href="{{ unsubscribe_url }}">Unsubscribe</a></body></html>',
      alt_content: 'Hi {{ contact.first_name }}, see https://example.com/offer',
    });
    const { id: campaignId, sendId } = await createCampaign(s.a, {
      template_ids: [s.templateId], mail_account_ids: [s.accountId], from_name: 'Ann from Plover', reply_to_email: 'reply@plover.test',
    });
    const before = sink.messages.length;
    const up = await s.a.post('/email/contacts/upsert', {
      email: 'Ada@Example.com', first_name: 'Ada', country_code: 'gb', custom_str_1: '<b>x</b>', tags: ['vip'],
    });
    assert.equal(up.statusCode, 200, up.body);
    await drain(t);
    await sink.waitFor(before + 1);
    const msg = sink.messages[before];
    assert.deepEqual(msg.to, ['ada@example.com']);
    assert.equal(msg.from, 'news@plover.test');
    const m = parseMessage(msg.raw);
    assert.equal(decodeHeader(m.headers.get('subject')!), 'Hello Ada from GB');
    assert.match(decodeHeader(m.headers.get('from')!), /Ann from Plover.*<news@plover\.test>/);
    assert.match(m.headers.get('reply-to')!, /reply@plover\.test/);

    const [log] = await sendLog(t, s.teamId);
    assert.equal(log.status, 'sent');
    assert.equal(log.attempts, 1);
    assert.equal(log.campaign_id, campaignId);
    assert.equal(m.headers.get('message-id'), `<${log.id}@plover.test>`);
    assert.equal(log.message_id, `${log.id}@plover.test`);

    const links = new TrackingLinks(testConfig().publicUrl, testConfig().appSecret!);
    // The unsubscribe URL names the recipient (team, contact), so it outlives the message row (retention).
    const unsubscribeUrl = links.recipientUnsubscribeUrl({ teamId: s.teamId, contactId: log.contact_id, email: log.email });
    assert.ok(log.contact_id);
    assert.equal(m.headers.get('list-unsubscribe'), `<${unsubscribeUrl}>`);
    assert.equal(m.headers.get('list-unsubscribe-post'), 'List-Unsubscribe=One-Click');

    assert.match(m.html, /Hi Ada \(&lt;b&gt;x&lt;\/b&gt;\)/, 'contact values are HTML-escaped');
    assert.match(m.html, /<p>VIP<\/p>/, 'tags are available');
    const click = links.clickUrl(log.id, 'https://example.com/offer?a=1&b=2').replace(/&/g, '&amp;');
    assert.ok(m.html.includes(`href="${click}"`), 'the link goes through the signed click redirect');
    assert.ok(!m.html.includes('href="https://example.com/offer'), 'no untracked copy of the link');
    assert.ok(m.html.includes('href="mailto:help@example.com"'), 'mailto links are left alone');
    assert.ok(m.html.includes(`href="${unsubscribeUrl}"`), 'the unsubscribe link is direct');
    assert.ok(m.html.includes(links.openPixelUrl(log.id)), 'open pixel');
    assert.ok(m.html.includes(`href="${links.honeypotUrl(log.id)}"`), 'honeypot link');
    assert.match(m.html, /display:none/);
    assert.equal(m.text.trim(), `Hi Ada, see ${links.clickUrl(log.id, 'https://example.com/offer')}`);

    const [sent] = await eventsNamed(t, s.teamId, 'email.sent');
    const contact = await contactByEmail(t, s.teamId, 'ada@example.com');
    assert.deepEqual(sent.payload, {
      email_send_log_id: log.id, contact_id: contact.id, email: 'ada@example.com', subject: 'Hello Ada from GB',
      sent_at: (log.sent_at as Date).toISOString(), mail_server_id: s.accountId, campaign_id: campaignId, campaign_send_id: sendId,
    });
    assert.equal(contact.sent_count, 1);
    assert.ok(contact.first_sent_at && contact.last_sent_at);
    const campaign = (await s.a.get(`/email/campaigns/${campaignId}`)).json().campaign;
    assert.equal(campaign.campaign_sends[0].send_progress.total_sent, 1);
    assert.equal(campaign.campaign_sends[0].send_progress.delivery_rate, 1);
    assert.equal(campaign.draft_data.last_sent_at, (log.sent_at as Date).toISOString());

    const [saved] = await eventsNamed(t, s.teamId, 'contact.saved');
    const d = await s.a.get(`/email/events/${saved.id}/decisions`);
    assert.equal(d.statusCode, 200);
    assert.equal(d.json().processed, true);
    assert.deepEqual(
      d.json().decisions.map((x: any) => [x.campaign_id, x.decision, x.reason, x.email_send_log_id, x.send_status]),
      [[campaignId, 'send', null, log.id, 'sent']],
    );

    // A duplicate send_email job (or a retried one) claims nothing: still one message.
    await t.database.pool.query(`SELECT graphile_worker.add_job('send_email', json_build_object('email_send_log_ids', json_build_array($1::text)))`, [log.id]);
    await drain(t);
    assert.equal(sink.messages.length, before + 1);
    assert.equal((await sendLog(t, s.teamId))[0].attempts, 1);
  });

  test('without tracking: plain links, no pixel, no honeypot; unsubscribe headers still there', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], open_tracking: false, click_tracking: false });
    const before = sink.messages.length;
    await s.a.post('/email/contacts/upsert', { email: 'plain@example.com', first_name: 'Pia' });
    await drain(t);
    await sink.waitFor(before + 1);
    const m = parseMessage(sink.messages[before].raw);
    assert.ok(m.html.includes('href="https://example.com/offer?a=1&b=2"'));
    assert.ok(!m.html.includes('/t/o/') && !m.html.includes('/t/h/') && !m.html.includes('/t/c/'));
    assert.ok(m.headers.get('list-unsubscribe'));
    assert.match(m.text, /Hi Pia/, 'the text part is derived when the template has none');
  });

  test('each message goes to the SMTP socket in one write (after DATA, before the final dot)', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const before = sink.messages.length;
    for (const email of ['w1@example.com', 'w2@example.com', 'w3@example.com']) {
      assert.equal((await s.a.post('/email/contacts/upsert', { email, first_name: 'W' })).statusCode, 200);
    }
    // The writes of the client's sockets to the sink, counted between DATA and the final dot.
    const perMessage: number[] = [];
    const inData = new WeakMap<Socket, number>();
    const stop = watchSocketWrites(sink.port, (socket, chunk) => {
      const n = inData.get(socket);
      if (n === undefined) {
        if (chunk === 'DATA\r\n') inData.set(socket, 0);
      } else if (chunk === '.\r\n' || chunk.endsWith('\r\n.\r\n')) {
        perMessage.push(chunk === '.\r\n' ? n : n + 1);
        inData.delete(socket);
      } else {
        inData.set(socket, n + 1);
      }
    });
    try {
      await drain(t);
    } finally {
      stop();
    }
    await sink.waitFor(before + 3);
    // nodemailer alone writes each header block, boundary and part by itself (ten here).
    assert.deepEqual(perMessage, [1, 1, 1]);
  });

  test('5xx at RCPT TO: hard bounce, contact bounced, counters and email.bounced.hard; no retry', async () => {
    const s = await setup(t, sink.port);
    const { sendId } = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await s.a.post('/email/contacts/upsert', { email: 'hard1@example.com' });
    await drain(t);
    const [log] = await sendLog(t, s.teamId);
    assert.equal(log.status, 'bounced_hard');
    assert.equal(log.attempts, 1);
    assert.match(log.smtp_response!, /550/);
    const contact = await contactByEmail(t, s.teamId, 'hard1@example.com');
    assert.equal(contact.status, 'bounced');
    assert.equal(contact.hard_bounces_count, 1);
    assert.equal(contact.sent_count, 0);
    assert.ok(contact.first_bounced_at && contact.last_bounced_at);
    const [ev] = await eventsNamed(t, s.teamId, 'email.bounced.hard');
    assert.equal(ev.payload.email_send_log_id, log.id);
    assert.equal(ev.payload.contact_id, contact.id);
    assert.equal(ev.payload.bounce_category, 'rejected');
    assert.equal(ev.payload.message_id, log.message_id);
    assert.match(String(ev.payload.diagnostic), /^smtp; .*550/);
    const send = await t.database.db.selectFrom('campaign_sends').select('send_progress').where('id', '=', sendId).executeTakeFirstOrThrow();
    assert.equal((send.send_progress as any).total_bounced, 1);
    assert.equal((send.send_progress as any).delivery_rate, 0);

    // A bounced contact is skipped by the next trigger.
    await s.a.post('/email/contacts/upsert', { email: 'hard1@example.com', first_name: 'Again' });
    await drain(t);
    const saved = await eventsNamed(t, s.teamId, 'contact.saved');
    const d = (await s.a.get(`/email/events/${saved[1].id}/decisions`)).json();
    assert.deepEqual(d.decisions.map((x: any) => x.reason), ['bounced']);
  });

  test('4xx: deferred and retried with backoff, then a soft bounce when the retries are spent', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const attempts = sink.rcptAttempts.length;
    await s.a.post('/email/contacts/upsert', { email: 'soft1@example.com' });
    await drain(t, { config: { sendRetryDelays: [0, 0] } });
    const [log] = await sendLog(t, s.teamId);
    assert.equal(log.status, 'bounced_soft');
    assert.equal(log.attempts, 3, 'first try and two retries');
    assert.equal(sink.rcptAttempts.length - attempts, 3);
    assert.equal((await eventsNamed(t, s.teamId, 'email.deferred')).length, 2);
    const [soft] = await eventsNamed(t, s.teamId, 'email.bounced.soft');
    assert.equal(soft.payload.email_send_log_id, log.id);
    const [deferred] = await eventsNamed(t, s.teamId, 'email.deferred');
    assert.match(String(deferred.payload.defer_reason), /451/);
    const contact = await contactByEmail(t, s.teamId, 'soft1@example.com');
    assert.equal(contact.status, 'active', 'a soft bounce does not suppress the contact');
    assert.equal(contact.soft_bounces_count, 1);
  });

  test('soft bounces given up at SMTP time count toward the soft-bounce limit (3 in 7 days): suppressed, contact bounced', async () => {
    const s = await setup(t, sink.port);
    const send = async (email: string) => {
      const res = await s.a.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: email });
      if (res.statusCode !== 202) return res;
      // No retries: the first 451 is given up, a soft bounce.
      await drain(t, { config: { sendRetryDelays: [] } });
      return res;
    };
    const listed = async (email: string) =>
      (await t.database.pool.query('SELECT reason, message_id FROM suppressions WHERE team_id = $1 AND email = $2', [s.teamId, email])).rows;
    const email = 'soft-limit@example.com';
    await s.a.post('/email/contacts/upsert', { email });
    for (let i = 1; i <= 2; i++) await send(email);
    assert.deepEqual(await listed(email), [], 'two soft bounces: below the limit');
    assert.equal((await contactByEmail(t, s.teamId, email)).status, 'active');
    await send(email);
    const logs = (await sendLog(t, s.teamId)).filter((l) => l.email === email);
    assert.deepEqual(logs.map((l) => l.status), ['bounced_soft', 'bounced_soft', 'bounced_soft']);
    assert.deepEqual(await listed(email), [{ reason: 'soft_bounce', message_id: logs[2]!.id }]);
    const contact = await contactByEmail(t, s.teamId, email);
    assert.equal(contact.status, 'bounced');
    assert.equal(contact.soft_bounces_count, 3);
    const fourth = await send(email);
    assert.equal(fourth.statusCode, 422, fourth.body);
    assert.equal(fourth.json().error.code, 'RECIPIENT_SUPPRESSED');

    // Bounces older than the window do not count.
    const old = 'soft-old@example.com';
    for (let i = 1; i <= 2; i++) await send(old);
    await t.database.pool.query(`UPDATE email_send_log SET bounced_at = now() - interval '8 days' WHERE team_id = $1 AND email = $2`, [s.teamId, old]);
    await send(old);
    assert.deepEqual(await listed(old), [], 'two of the three are older than 7 days');
  });

  test('a deferred retry waits for its delay', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await s.a.post('/email/contacts/upsert', { email: 'soft2@example.com' });
    await drain(t, { config: { sendRetryDelays: [3600] } });
    const failures = [...drainFailures];
    const [log] = await sendLog(t, s.teamId);
    assert.equal(log.status, 'deferred');
    assert.equal(log.attempts, 1);
    // The retry job is due the schedule's delay ± 20 % (jitter) after the deferral.
    const { rows } = await t.database.pool.query<{ wait: number }>(
      `SELECT extract(epoch FROM j.run_at - l.updated_at)::float8 AS wait
         FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id, email_send_log l
        WHERE k.identifier = 'send_email' AND l.id = $1 AND (j.payload::jsonb)->'email_send_log_ids' @> to_jsonb(ARRAY[l.id::text])`, [log.id]);
    assert.equal(rows.length, 1, `one send job for the message; job failures while draining: ${failures.join(' | ') || 'none'}`);
    assert.ok(rows[0]!.wait >= 3600 * 0.8 - 1 && rows[0]!.wait <= 3600 * 1.2 + 1, `retry due ${rows[0]!.wait} s after the deferral`);
  });

  test('a send job run again after recording a deferral (its graphile retry) does not send the message before its retry is due', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await s.a.post('/email/contacts/upsert', { email: 'soft-again@example.com' });
    await drain(t, { config: { sendRetryDelays: [3600] } });
    const [log] = await sendLog(t, s.teamId);
    assert.equal(log.status, 'deferred');
    assert.equal(log.attempts, 1);
    assert.ok(log.retry_at && log.retry_at.getTime() > Date.now() + 3600_000 * 0.8 - 5_000, `retry_at ${log.retry_at?.toISOString()}`);
    const rcpts = () => sink.rcptAttempts.filter((a) => a === 'soft-again@example.com').length;
    assert.equal(rcpts(), 1);
    // The job that deferred it, run again (as graphile-worker does when a job fails after its results were recorded).
    const { sendEmailTask } = await import('../../src/mail/send.ts');
    const task = sendEmailTask({ db: t.database.db, config: testConfig({ sendRetryDelays: [3600] }) });
    await task({ email_send_log_ids: [log.id] }, {} as never);
    const [again] = await sendLog(t, s.teamId);
    assert.equal(rcpts(), 1, 'not sent again before its retry is due');
    assert.equal(again.status, 'deferred');
    assert.equal(again.attempts, 1);
    // Once due (its retry job runs then), it is sent.
    await t.database.pool.query(`UPDATE email_send_log SET retry_at = now() - interval '1 second' WHERE id = $1`, [log.id]);
    await task({ email_send_log_ids: [log.id] }, {} as never);
    assert.equal(rcpts(), 2);
    assert.equal((await sendLog(t, s.teamId))[0]!.attempts, 2);
  });

  // A newsletter template is tens of KiB: read once per message, a batch of 50
  // brought 50 copies of it from the database and parsed them on the worker's
  // event loop (src/mail/send.ts, loadContexts).
  test('a batch reads its template\'s content from the database once, not once per message', async () => {
    const marker = 'Newsletter block';
    const content = `<html><body><p>Hi {{ contact.email }}</p>${`<p>${marker} ${'x'.repeat(1000)}</p>`.repeat(40)}</body></html>`;
    const s = await setup(t, sink.port, { content, alt_content: 'Hi {{ contact.email }}' });
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const emails = Array.from({ length: 12 }, (_, i) => `batch${i}@example.com`);
    const up = await s.a.post('/email/contacts/bulk-upsert', { contacts: emails.map((email) => ({ email })) });
    assert.equal(up.statusCode, 200, up.body);
    const before = sink.messages.length;
    // Every query result of the drain, searched for the template's content.
    // oxlint-disable-next-line typescript/unbound-method -- restored below, called with .apply(this)
    const original = pg.Client.prototype.query;
    let copies = 0;
    (pg.Client.prototype as { query: unknown }).query = function (this: pg.Client, ...args: unknown[]) {
      const out = (original as (...a: unknown[]) => unknown).apply(this, args);
      if (out instanceof Promise) {
        void out.then((r: { rows?: unknown[] } | undefined) => {
          if (Array.isArray(r?.rows)) copies += JSON.stringify(r.rows).split(marker).length - 1;
        }, () => {});
      }
      return out;
    };
    try {
      await drain(t);
    } finally {
      pg.Client.prototype.query = original;
    }
    const got = sink.messages.slice(before);
    assert.equal(got.length, 12);
    for (const m of got) assert.equal(parseMessage(m.raw).html.split(marker).length - 1, 40, 'each message carries the whole template');
    // 40 blocks per copy: one copy for the batch (the 12 messages are one send job).
    assert.equal(copies / 40, 1, `template content read ${copies / 40} times for 12 messages`);
  });

  /** An SMTP server that answers MAIL FROM after `delayMs` and counts what it receives, keeping nothing. */
  async function slowServer(delayMs: number) {
    const got = { count: 0 };
    const server = new SMTPServer({
      secure: false, disabledCommands: ['STARTTLS'], authOptional: true, logger: false, disableReverseLookup: true, closeTimeout: 100,
      onMailFrom(_address, _session, callback) {
        setTimeout(callback, delayMs);
      },
      onData(stream, _session, callback) {
        stream.resume();
        stream.on('end', () => {
          got.count++;
          callback();
        });
      },
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    return { got, port: (server.server.address() as AddressInfo).port, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  }

  // A job renders all its messages at once and they wait, rendered, for the
  // account's five connections: behind a slow (or hostile) SMTP server a job held
  // most of them, each up to the caps. Large ones are now rendered only while the
  // worker holds less than SEND_RENDERED_CHARS of them (src/mail/render-ahead.ts).
  test('behind a slow SMTP server, large messages held stay within SEND_RENDERED_CHARS and one more, none once done', async () => {
    const slow = await slowServer(300);
    try {
      const block = '<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>\n';
      const content = `<html><body><p>{{ contact.email }}</p>${block.repeat(4800)}</body></html>`;
      const s = await setup(t, slow.port, { content, alt_content: 'Hi' });
      await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
      const up = await s.a.post('/email/contacts/bulk-upsert', { contacts: Array.from({ length: 12 }, (_, i) => ({ email: `slow${i}@example.com` })) });
      assert.equal(up.statusCode, 200, up.body);
      let peak = 0;
      const sampler = setInterval(() => (peak = Math.max(peak, renderedCharsHeld())), 5);
      const budget = 1024 * 1024;
      try {
        await drain(t, { config: { sendRenderedChars: budget } });
      } finally {
        clearInterval(sampler);
      }
      assert.equal(slow.got.count, 12);
      assert.deepEqual([...new Set((await sendLog(t, s.teamId)).map((r) => r.status))], ['sent']);
      assert.equal(renderedCharsHeld(), 0, 'every message released what it held');
      // A message is over 300,000 characters (past the first render's cut), the 12
      // about 3.6 Mi: all held at once before.
      const one = content.length;
      assert.ok(one > 256 * 1024);
      assert.ok(peak <= budget + one * 1.2, `held ${peak} characters, one message is about ${one}`);
      assert.ok(peak >= budget, `held ${peak} characters: large renders go ahead up to the budget`);
    } finally {
      await slow.close();
    }
  });

  test('a message over the first render\'s cut is sent whole; one over the full cap fails naming the full cap', async () => {
    const block = '<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>\n';
    const content = `<html><body>{% if contact.first_name == "Huge" %}${block.repeat(9000)}{% endif %}${block.repeat(4800)}</body></html>`;
    const s = await setup(t, sink.port, { content, alt_content: 'Hi' });
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    assert.equal((await s.a.post('/email/contacts/upsert', { email: 'big@example.com', first_name: 'Big' })).statusCode, 200);
    assert.equal((await s.a.post('/email/contacts/upsert', { email: 'huge@example.com', first_name: 'Huge' })).statusCode, 200);
    const before = sink.messages.length;
    const render = { ...testConfig().render, maxOutputChars: 600_000, maxHtmlChars: 600_000 };
    await drain(t, { config: { render } });
    const rows = await sendLog(t, s.teamId);
    const big = rows.find((r) => r.email === 'big@example.com')!;
    const huge = rows.find((r) => r.email === 'huge@example.com')!;
    assert.equal(big.status, 'sent');
    assert.equal(parseMessage(sink.messages[before]!.raw).html.split(block.trim()).length - 1, 4800);
    assert.equal(huge.status, 'failed');
    assert.match(huge.last_error!, /600000 characters/);
  });

  test('a row left in `sending` by a dead worker is never sent again: failed after the lease', async () => {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await s.a.post('/email/contacts/upsert', { email: 'crash@example.com' });
    await drain(t);
    const before = sink.messages.length;
    // As if a worker had claimed the row and died mid-send: the retried job finds it in `sending`.
    const [log] = await sendLog(t, s.teamId);
    await t.database.pool.query(`UPDATE email_send_log SET status = 'sending', updated_at = now() - interval '1 hour' WHERE id = $1`, [log.id]);
    const { sendEmailTask } = await import('../../src/mail/send.ts');
    const task = sendEmailTask({ db: t.database.db, config: testConfig({ sendLeaseSeconds: 600 }) });
    await task({ email_send_log_ids: [log.id] }, {} as never);
    const [after] = await sendLog(t, s.teamId);
    assert.equal(after.status, 'failed');
    assert.match(after.last_error!, /not resent/);
    assert.equal(sink.messages.length, before);
    // Within the lease the job is retried later (it throws), still without sending.
    await t.database.pool.query(`UPDATE email_send_log SET status = 'sending', updated_at = now() WHERE id = $1`, [log.id]);
    await assert.rejects(async () => task({ email_send_log_ids: [log.id] }, {} as never));
    assert.equal(sink.messages.length, before);
  });
});
