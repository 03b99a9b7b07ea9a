// Mail that comes back, end to end on 127.0.0.1: messages sent through a relay
// that accepts everything (the capture sink) with a signed return path and
// reply address; then a real DSN, ARF report and reply delivered by SMTP to
// the inbound listener → message and contact status, suppression, signed
// webhooks at a real receiver. Every other recipient, and a forged signature,
// is refused at RCPT.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import nodemailer, { type Transporter } from 'nodemailer';
import pino from 'pino';
import { closeTransports } from '../../src/mail/send.ts';
import { startInboundListener, type InboundListener } from '../../src/inbound/listener.ts';
import { parseInboundAddress } from '../../src/inbound/address.ts';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { eventually, startReceiver, verifyFy, type Receiver } from '../webhooks/receiver.ts';
import { contactByEmail, drain, setup, type Setup } from '../engine/fixtures.ts';
import { parseMessage, startCaptureSink, type CaptureSink, type Received as SinkMessage } from '../engine/sink.ts';

const DOMAIN = 'bounces.plover.test';
const FBL = `fbl@${DOMAIN}`;
const base = testConfig({ allowedPrivateTargets: ['127.0.0.1'] });
const config = testConfig({
  allowedPrivateTargets: ['127.0.0.1'],
  inbound: { ...base.inbound, domain: DOMAIN, fblAddress: FBL, smtpPort: 0, smtpHost: '127.0.0.1', maxRecipients: 3 },
});

const fixture = (name: string, messageId: string) =>
  readFileSync(new URL(`../fixtures/inbound/${name}`, import.meta.url), 'latin1').replaceAll('@@MESSAGE_ID@@', messageId);

describe('inbound listener: DSN, ARF and replies through SMTP into the message log', () => {
  let t: TestApp;
  let sink: CaptureSink;
  let receiver: Receiver;
  let dispatcher: WebhookDispatcher;
  let listener: InboundListener;
  let s: Setup;
  let secret: string;
  let client: Transporter;

  before(async () => {
    t = await buildTestApp({ config });
    sink = await startCaptureSink();
    receiver = await startReceiver();
    dispatcher = new WebhookDispatcher({ db: t.database.db, pool: t.database.pool, config, log: pino({ level: 'silent' }) });
    await dispatcher.start();
    listener = await startInboundListener({ db: t.database.db, config, log: pino({ level: 'silent' }) });
    client = nodemailer.createTransport({ host: '127.0.0.1', port: listener.port, secure: false, ignoreTLS: true });
    s = await setup(t, sink.port);
    await t.database.db.updateTable('mail_accounts').set({ verp: true, capture_replies: true }).where('id', '=', s.accountId).execute();
    const hook = await s.a.post('/webhooks', {
      url: receiver.url, events: ['email.bounced.hard', 'email.bounced.soft', 'email.complained', 'email.replied'],
    });
    assert.equal(hook.statusCode, 201, hook.body);
    secret = hook.json().webhook.secret;
  });
  after(async () => {
    client.close();
    await listener.close();
    await dispatcher.stop();
    closeTransports();
    await Promise.all([sink.close(), receiver.close()]);
    await t.close();
  });

  /** Sends a transactional e-mail to `to` through the sink; its log row and what the relay got. */
  async function send(to: string): Promise<{ id: string; messageId: string; at: SinkMessage }> {
    const res = await s.a.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: to });
    assert.equal(res.statusCode, 202, res.body);
    const id = res.json().email.id as string;
    await drain(t, { config });
    const at = sink.messages.find((m) => m.to.includes(to));
    assert.ok(at, `${to} reached the relay`);
    const row = await t.database.db.selectFrom('email_send_log').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    return { id, messageId: row.message_id!, at };
  }

  async function webhook(event: string, logId: string) {
    await drain(t, { config });
    let found: (typeof receiver.received)[number] | undefined;
    await eventually(async () => {
      found = receiver.received.find((r) => r.body.event === event && r.body.payload?.email_send_log_id === logId);
      assert.ok(found, `no ${event} webhook for ${logId}; got ${receiver.received.map((r) => r.body.event).join(', ')}`);
    });
    assert.ok(verifyFy(found!, secret), 'the webhook is signed with the webhook secret');
    return found!.body as { event: string; team_id: string; payload: Record<string, any> };
  }

  const deliver = (to: string, raw: string, from = '') => client.sendMail({ envelope: { from, to: [to] }, raw });
  const row = (id: string) => t.database.db.selectFrom('email_send_log').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const suppression = (email: string) =>
    t.database.db.selectFrom('suppressions').selectAll().where('team_id', '=', s.teamId).where('email', '=', email).executeTakeFirst();

  test('the relay sees a signed return path and reply address per message', async () => {
    const { id, at } = await send('ann@example.com');
    assert.match(at.from, new RegExp(`^b-[0-9a-f]{32}-[0-9a-f]{16}@${DOMAIN.replace(/\./g, '\\.')}$`));
    assert.deepEqual(parseInboundAddress(config.appSecret!, DOMAIN, FBL, at.from), { type: 'bounce', message_id: id });
    const replyTo = parseMessage(at.raw).headers.get('reply-to')!;
    assert.deepEqual(parseInboundAddress(config.appSecret!, DOMAIN, FBL, replyTo.trim()), { type: 'reply', message_id: id });
  });

  test('a DSN to the return path: hard bounce, contact bounced, suppressed, signed email.bounced.hard', async () => {
    const up = await s.a.post('/email/contacts/upsert', { email: 'gone@example.com' });
    assert.equal(up.statusCode, 200, up.body);
    const { id, messageId, at } = await send('gone@example.com');
    assert.equal((await row(id)).status, 'sent', 'the relay accepted it');
    const info = await deliver(at.from, fixture('postfix-hard-5.1.1.eml', messageId));
    assert.match(String(info.response), /^250/);
    const r = await row(id);
    assert.equal(r.status, 'bounced_hard', 'recorded before the 250');
    assert.match(r.last_error ?? '', /No such user/);
    assert.equal((await contactByEmail(t, s.teamId, 'gone@example.com'))!.status, 'bounced');
    assert.equal((await suppression('gone@example.com'))?.reason, 'bounced_hard');
    const hook = await webhook('email.bounced.hard', id);
    assert.equal(hook.team_id, s.teamId);
    assert.equal(hook.payload.email, 'gone@example.com');
    assert.equal(hook.payload.contact_id, up.json().contact.id);
    assert.equal(hook.payload.message_id, messageId);
    assert.equal(hook.payload.status_code, '5.1.1');
    assert.equal(hook.payload.bounce_category, 'invalid_recipient');
    assert.match(hook.payload.diagnostic, /No such user/);

    // The same DSN again (a sender retrying after a lost 250): recorded once.
    await deliver(at.from, fixture('postfix-hard-5.1.1.eml', messageId));
    await drain(t, { config });
    const feedback = await t.database.db.selectFrom('message_feedback').selectAll().where('email_send_log_id', '=', id).execute();
    assert.equal(feedback.length, 1);
    const contact = await contactByEmail(t, s.teamId, 'gone@example.com');
    assert.equal(contact!.hard_bounces_count, 1);
  });

  test('a soft bounce (4.x.x, given up) → bounced_soft and email.bounced.soft; the contact stays active', async () => {
    await s.a.post('/email/contacts/upsert', { email: 'full@example.com' });
    const { id, messageId, at } = await send('full@example.com');
    await deliver(at.from, fixture('postfix-soft-4.4.1.eml', messageId));
    assert.equal((await row(id)).status, 'bounced_soft');
    const contact = await contactByEmail(t, s.teamId, 'full@example.com');
    assert.equal(contact!.status, 'active');
    assert.equal(contact!.soft_bounces_count, 1);
    const hook = await webhook('email.bounced.soft', id);
    assert.equal(hook.payload.status_code, '4.4.1');
  });

  test('an ARF report to the feedback-loop address → complained contact, suppression, email.complained', async () => {
    const up = await s.a.post('/email/contacts/upsert', { email: 'angry@example.com' });
    const { id, messageId } = await send('angry@example.com');
    await deliver(FBL, fixture('arf-yahoo.eml', messageId), 'feedback@yahoo.example');
    assert.equal((await contactByEmail(t, s.teamId, 'angry@example.com'))!.status, 'complained');
    assert.equal((await suppression('angry@example.com'))?.reason, 'complained');
    assert.equal((await row(id)).status, 'sent', 'a complaint is a timeline event, not a status');
    const hook = await webhook('email.complained', id);
    assert.deepEqual(Object.keys(hook.payload).sort(), ['complained_at', 'contact_id', 'email', 'email_send_log_id', 'feedback_type', 'message_id']);
    assert.equal(hook.payload.contact_id, up.json().contact.id);
    assert.equal(hook.payload.feedback_type, 'abuse');
    assert.equal(hook.payload.message_id, messageId);
    // The message's timeline shows it.
    const got = await t.app.inject({ method: 'GET', url: `/public/v1/email/emails/${id}`, headers: { 'x-api-key': s.key } });
    assert.equal(got.statusCode, 200, got.body);
    const types = got.json().email.events.map((e: any) => e.type);
    assert.deepEqual(types.slice(-1), ['complained'], JSON.stringify(types));
  });

  test('a reply to the signed reply address → email.replied with its text', async () => {
    const { id, messageId, at } = await send('friend@example.com');
    const replyTo = parseMessage(at.raw).headers.get('reply-to')!.trim();
    const raw = [
      'From: Friend <friend@example.com>', `To: ${replyTo}`, 'Subject: Re: Welcome', 'Message-ID: <answer-1@example.com>',
      `In-Reply-To: <${messageId}>`, 'Date: Tue, 24 Nov 2026 10:00:00 +0000', 'Content-Type: text/plain; charset=utf-8', '',
      'Thanks! Do you ship to Canada?', '',
    ].join('\r\n');
    await deliver(replyTo, raw, 'friend@example.com');
    const hook = await webhook('email.replied', id);
    assert.equal(hook.payload.email, 'friend@example.com');
    assert.equal(hook.payload.subject, 'Re: Welcome');
    assert.match(hook.payload.content, /ship to Canada/);
    assert.equal(hook.payload.message_id, 'answer-1@example.com');
    assert.equal(hook.payload.in_reply_to, messageId);
    assert.equal(hook.payload.headers.subject, 'Re: Welcome');
    assert.ok(hook.payload.replied_at);
  });

  test('every other recipient is refused at RCPT: not ours, another domain (no relay), a forged or expired signature', async () => {
    const { at } = await send('someone@example.com');
    const local = at.from.split('@')[0]!;
    const sig = local.slice(-16);
    const forged = `${local.slice(0, -16)}${sig[0] === '0' ? '1' : '0'}${sig.slice(1)}@${DOMAIN}`;
    const otherMessage = `b-${'0'.repeat(32)}-${sig}@${DOMAIN}`;
    for (const to of [`postmaster@${DOMAIN}`, 'victim@example.org', forged, otherMessage, at.from.replace(DOMAIN, 'example.org')]) {
      await assert.rejects(deliver(to, 'Subject: x\r\n\r\nx\r\n'), (err: any) => {
        assert.equal(err.responseCode, 550, `${to}: ${err.message}`);
        assert.match(err.command ?? '', /RCPT/i);
        return true;
      });
    }
    // A signed address whose message is gone (retention) has expired.
    const { id, at: gone } = await send('expired@example.com');
    await t.database.db.deleteFrom('email_send_log').where('id', '=', id).execute();
    await assert.rejects(deliver(gone.from, 'Subject: x\r\n\r\nx\r\n'), (err: any) => err.responseCode === 550);
  });

  test('RCPTs of concurrent sessions looked up together: each gets its own answer (live accepted, expired refused)', async () => {
    const live = [];
    for (const to of ['batch-1@example.com', 'batch-2@example.com', 'batch-3@example.com']) live.push(await send(to));
    const dead = [];
    for (const to of ['batch-x@example.com', 'batch-y@example.com']) dead.push(await send(to));
    await t.database.db.deleteFrom('email_send_log').where('id', 'in', dead.map((d) => d.id)).execute();
    // Each on its own connection, all at once: their RCPTs fall into the same lookups.
    const one = (to: string) => {
      const c = nodemailer.createTransport({ host: '127.0.0.1', port: listener.port, secure: false, ignoreTLS: true });
      return c.sendMail({ envelope: { from: '', to: [to] }, raw: 'Subject: x\r\n\r\nx\r\n' }).then(
        (info) => ({ to, code: Number(String(info.response).slice(0, 3)) }),
        (err: any) => ({ to, code: err.responseCode as number }),
      ).finally(() => c.close());
    };
    const order = [live[0]!, dead[0]!, live[1]!, dead[1]!, live[2]!];
    const results = await Promise.all(order.map((m) => one(m.at.from)));
    assert.deepEqual(results.map((r) => r.code), [250, 550, 250, 550, 250]);
  });

  test('unreadable or unmatched mail to a valid address is accepted and dropped, never refused into a retry loop', async () => {
    const { id, at } = await send('quiet@example.com');
    const info = await deliver(at.from, 'From: someone@example.net\r\nSubject: hello\r\n\r\njust text\r\n', 'someone@example.net');
    assert.match(String(info.response), /^250/);
    assert.equal((await row(id)).status, 'sent');
  });

  test('several messages over one connection: each report applies to its own message only', async () => {
    const a = await send('pool-a@example.com');
    const b = await send('pool-b@example.com');
    const pooled = nodemailer.createTransport({ host: '127.0.0.1', port: listener.port, secure: false, ignoreTLS: true, pool: true, maxConnections: 1 });
    try {
      await pooled.sendMail({ envelope: { from: '', to: [a.at.from] }, raw: fixture('postfix-hard-5.1.1.eml', a.messageId) });
      // The second DSN quotes no Message-ID of ours: only its own return path may name a message.
      await pooled.sendMail({ envelope: { from: '', to: [b.at.from] }, raw: fixture('postfix-soft-4.4.1.eml', 'unrelated@example.net') });
    } finally {
      pooled.close();
    }
    assert.equal((await row(a.id)).status, 'bounced_hard');
    assert.equal((await row(b.id)).status, 'bounced_soft');
    const kinds = await t.database.db.selectFrom('message_feedback').select(['email_send_log_id', 'kind']).where('email_send_log_id', 'in', [a.id, b.id]).execute();
    assert.deepEqual(kinds.map((k) => `${k.email_send_log_id === a.id ? 'a' : 'b'}:${k.kind}`).sort((x, y) => x.localeCompare(y)), ['a:bounce_hard', 'b:bounce_soft']);
  });

  test('recipients per message are capped', async () => {
    const sent = [];
    for (const e of ['r1@example.com', 'r2@example.com', 'r3@example.com', 'r4@example.com']) sent.push(await send(e));
    const err = await client.sendMail({ envelope: { from: '', to: sent.map((x) => x.at.from) }, raw: 'Subject: x\r\n\r\nx\r\n' })
      .then((info: unknown) => info as any, (e: any) => e);
    // nodemailer sends to the accepted ones and reports the refused one.
    const rejected = (err.rejected ?? []) as string[];
    assert.deepEqual(rejected, [sent[3]!.at.from], JSON.stringify(err));
  });
});
