// POST /email/emails/batch: validated whole (every bad index named, nothing
// written or sent), ids in request order, suppressed items not sent; and the
// message log: timelines, the email.sent webhook, team isolation, campaign mail.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { closeTransports } from '../../src/mail/send.ts';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { createCampaign, drain } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';
import { rowsOf, sendJobsFor, txSetup } from './fixtures.ts';

const config = testConfig({ allowedPrivateTargets: ['127.0.0.1'] });

describe('transactional batch and the message log', () => {
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
  const atSink = (to: string) => sink.messages.filter((m) => m.to.includes(to));

  test('one bad item rejects the batch: every bad index named, nothing written, nothing sent', async () => {
    const s = await txSetup(t, sink.port);
    const ok = (to: string) => ({ template_id: s.templateId, mail_account_id: s.accountId, to_email: to });
    const other = await txSetup(t, sink.port);
    // Shape errors and unknown rows in one request: both kinds named, each at its index.
    const shape = await s.c.post('/email/emails/batch', {
      emails: [ok('b0@example.com'), { ...ok('not-an-address') }, { ...ok('b2@example.com'), mail_account_id: other.accountId },
        { ...ok('b3@example.com'), template_id: 'x' }],
    });
    assert.equal(shape.statusCode, 422, shape.body);
    const fields = shape.json().error.details.map((d: any) => d.field);
    assert.deepEqual(fields.map((f: string) => f.split('.')[0]), ['emails[1]', 'emails[2]', 'emails[3]'], fields.join());
    assert.ok(fields.includes('emails[1].to_email') && fields.includes('emails[2].mail_account_id') && fields.includes('emails[3].template_id'));

    const refs = await s.c.post('/email/emails/batch', {
      emails: [ok('c0@example.com'), { ...ok('c1@example.com'), template_id: other.templateId }, ok('c2@example.com'),
        { ...ok('c3@example.com'), mail_account_id: other.accountId }, { ...ok('c4@example.com'), contact_id: other.accountId }],
    });
    assert.equal(refs.statusCode, 422, refs.body);
    assert.deepEqual(refs.json().error.details.map((d: any) => d.field),
      ['emails[1].template_id', 'emails[3].mail_account_id', 'emails[4].contact_id'], 'another team\'s rows are unknown here');
    await drain(t);
    assert.equal((await rowsOf(t, s.teamId)).length, 0);
    assert.equal(atSink('c0@example.com').length + atSink('b0@example.com').length, 0);
  });

  test('ids in request order, one job per batch of sends at the transactional priority; a suppressed item is not sent', async () => {
    const s = await txSetup(t, sink.port);
    const gone = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'hard-x@example.com' });
    await drain(t);
    assert.equal((await s.c.get(`/email/emails/${gone.json().email.id}`)).json().email.status, 'bounced');

    const to = ['o0@example.com', 'o1@example.com', 'hard-x@example.com', 'o3@example.com', 'o4@example.com'];
    const res = await s.c.post('/email/emails/batch', {
      emails: to.map((e, i) => ({ template_id: s.templateId, mail_account_id: s.accountId, to_email: e, variables: { order_id: `N${i}` } })),
    });
    assert.equal(res.statusCode, 202, res.body);
    const items = res.json().emails;
    assert.deepEqual(items.map((e: any) => e.status), ['queued', 'queued', 'suppressed', 'queued', 'queued']);
    const rows = await rowsOf(t, s.teamId);
    const byId = new Map(rows.map((r) => [r.id, r]));
    assert.deepEqual(items.map((e: any) => byId.get(e.id)?.email), to, 'each id is the row of its index');
    const jobs = await sendJobsFor(t, items.map((e: any) => e.id));
    assert.equal(jobs.length, 1);
    assert.equal(jobs[0]!.priority, -2);
    assert.equal(jobs[0]!.payload.email_send_log_ids.length, 4);

    await drain(t);
    for (const [i, e] of to.entries()) {
      if (i === 2) assert.equal(sink.rcptAttempts.filter((a) => a === e).length, 1, 'only the first, bounced one: the suppressed item is not sent');
      else assert.match(atSink(e)[0]!.raw, new RegExp(`Order N${i}`));
    }
    const sup = (await s.c.get(`/email/emails/${items[2].id}`)).json().email;
    assert.equal(sup.status, 'suppressed');
    assert.deepEqual(sup.events.map((e: any) => e.type), ['queued', 'suppressed']);
  });

  test('per-item idempotency keys in a batch: a replayed item keeps its id and is not sent again', async () => {
    const s = await txSetup(t, sink.port);
    const item = (to: string, key: string) => ({ template_id: s.templateId, mail_account_id: s.accountId, to_email: to, idempotency_key: key });
    const first = await s.c.post('/email/emails/batch', { emails: [item('k1@example.com', 'k1')] });
    const second = await s.c.post('/email/emails/batch', { emails: [item('k2@example.com', 'k2'), item('k1@example.com', 'k1')] });
    assert.equal(second.statusCode, 202, second.body);
    assert.equal(second.json().emails[1].id, first.json().emails[0].id);
    const clash = await s.c.post('/email/emails/batch', { emails: [item('k9@example.com', 'k1')] });
    assert.equal(clash.statusCode, 409);
    const dup = await s.c.post('/email/emails/batch', { emails: [item('d1@example.com', 'same'), item('d2@example.com', 'same')] });
    assert.equal(dup.statusCode, 422);
    await drain(t);
    assert.equal(atSink('k1@example.com').length, 1);
    assert.equal((await rowsOf(t, s.teamId)).length, 2);
  });

  test('the email.sent webhook of a transactional e-mail: campaign ids null, email_send_log_id its id', async () => {
    const s = await txSetup(t, sink.port);
    const hook = await s.c.post('/webhooks', { url: receiver.url, events: ['email.sent'] });
    assert.equal(hook.statusCode, 201, hook.body);
    const res = await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'hooked@example.com' });
    const id = res.json().email.id;
    await drain(t, { config });
    const deadline = Date.now() + 10_000;
    let got;
    while (!(got = receiver.received.find((r) => r.body.payload?.email_send_log_id === id))) {
      if (Date.now() > deadline) throw new Error('no email.sent webhook');
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(got.body.event, 'email.sent');
    assert.equal(got.body.payload.campaign_id, null);
    assert.equal(got.body.payload.campaign_send_id, null);
    assert.equal(got.body.payload.email, 'hooked@example.com');
    assert.equal(got.body.payload.mail_server_id, s.accountId);
  });

  test('one log: campaign mail is there with source campaign; filters; another team\'s ids are 404', async () => {
    const s = await txSetup(t, sink.port, { subject: 'Welcome' });
    await createCampaign({ post: (u, p) => s.c.post(u, p), get: s.c.get }, {
      template_ids: [s.templateId], mail_account_ids: [s.accountId],
    });
    await s.c.post('/email/contacts/upsert', { email: 'camp@example.com' });
    await s.c.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'trans@example.com' });
    await drain(t);
    const all = (await s.c.get('/email/emails')).json();
    assert.equal(all.meta.total, '2');
    assert.deepEqual(all.emails.map((e: any) => e.source).sort(), ['campaign', 'transactional']);
    const camp = (await s.c.get('/email/emails?source=campaign')).json().emails;
    assert.deepEqual(camp.map((e: any) => e.to_email), ['camp@example.com']);
    assert.ok(camp[0].campaign_id);
    const detail = (await s.c.get(`/email/emails/${camp[0].id}`)).json().email;
    assert.equal(detail.source, 'campaign');
    assert.deepEqual(detail.events.map((e: any) => e.type), ['queued', 'sent']);
    assert.equal((await s.c.get('/email/emails?status=sent&to_email=TRANS@example.com')).json().emails.length, 1);
    assert.equal((await s.c.get('/email/emails?status=bounced')).json().emails.length, 0);
    assert.equal((await s.c.get('/email/emails?status=nope')).statusCode, 422);

    const stranger = await txSetup(t, sink.port);
    for (const e of all.emails) {
      const res = await stranger.c.get(`/email/emails/${e.id}`);
      assert.equal(res.statusCode, 404, res.body);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
    assert.equal((await stranger.c.get('/email/emails')).json().meta.total, '0');
    assert.equal((await stranger.c.get('/email/emails/not-a-uuid')).statusCode, 404);
  });
});
