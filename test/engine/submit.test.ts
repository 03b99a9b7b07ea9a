import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { createCampaign, drain, sendLog, setup } from './fixtures.ts';
import { parseMessage, startCaptureSink, type CaptureSink } from './sink.ts';

describe('POST /email/campaigns/{id}/submit', () => {
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

  test('fires one campaign for one contact, with the payload in the template; idempotent by key; cooldown applies', async () => {
    const s = await setup(t, sink.port, { content: '<p>Order {{ event.payload.order }} for {{ contact.email }}</p>' });
    const c = await createCampaign(s.a, {
      template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['lead.created'], event_triggered_send: { enabled: false },
    });
    const other = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['lead.created'] });
    await s.a.post('/email/contacts/upsert', { email: 'sub@example.com' });
    const res = await s.a.post(`/email/campaigns/${c.id}/submit`, { email: 'SUB@example.com', idempotency_key: 's-1', payload: { order: 'A-17' } });
    assert.equal(res.statusCode, 202, res.body);
    const body = res.json();
    assert.equal(body.decision.decision, 'send');
    assert.equal(body.decision.campaign_id, c.id);
    assert.equal(body.decision.send_status, 'queued');
    const again = await s.a.post(`/email/campaigns/${c.id}/submit`, { email: 'sub@example.com', idempotency_key: 's-1' });
    assert.equal(again.statusCode, 202);
    assert.equal(again.json().event_id, body.event_id);
    assert.equal(again.json().decision.email_send_log_id, body.decision.email_send_log_id);
    const before = sink.messages.length;
    await drain(t);
    await sink.waitFor(before + 1);
    assert.match(parseMessage(sink.messages[before].raw).html, /Order A-17 for sub@example\.com/);
    const logs = await sendLog(t, s.teamId);
    assert.equal(logs.length, 1);
    assert.equal(logs[0].status, 'sent');
    const third = await s.a.post(`/email/campaigns/${c.id}/submit`, { email: 'sub@example.com' });
    assert.equal(third.json().decision.reason, 'cooldown');
    const d = await s.a.get(`/email/events/${body.event_id}/decisions`);
    assert.deepEqual(d.json().decisions.map((x: any) => [x.campaign_id, x.decision]), [[c.id, 'send']], 'no other campaign was triggered');
    assert.ok(other.id);
  });

  test("an event's occurred_at in UTC year 0 or 10000 renders as JavaScript writes it, and the message goes out", async () => {
    const s = await setup(t, sink.port, { content: '<p>At {{ event.occurred_at }} for {{ contact.email }}</p>' });
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['sale.created'] });
    const cases = [['year0@example.com', '0001-01-01T00:00:00+15:59'], ['year10000@example.com', '9999-12-31T23:59:59-15:59']];
    for (const [email, occurred_at] of cases) {
      const res = await s.a.post('/email/events', { event_name: 'sale.created', email, occurred_at });
      assert.equal(res.statusCode, 202, res.body);
    }
    const before = sink.messages.length;
    await drain(t);
    await sink.waitFor(before + 2);
    const html = sink.messages.slice(before).map((m) => parseMessage(m.raw).html).sort();
    // Before, the render read PostgreSQL's own spelling ("0001-12-31T08:01:00+00:00 BC", "10000-…")
    // with Date, threw, and the job was retried with its messages left queued.
    assert.equal(html.length, 2);
    assert.ok(html.some((x) => x.includes('At 0000-12-31T08:01:00.000Z for year0@example.com')), html.join('\n'));
    assert.ok(html.some((x) => x.includes('At +010000-01-01T15:58:59.000Z for year10000@example.com')), html.join('\n'));
    assert.deepEqual((await sendLog(t, s.teamId)).map((l) => l.status), ['sent', 'sent']);
  });

  test('errors: unknown contact 422, missing email 422, unknown or other team campaign 404, key reused 409', async () => {
    const s = await setup(t, sink.port);
    const other = await setup(t, sink.port);
    const c = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const theirs = await createCampaign(other.a, { template_ids: [other.templateId], mail_account_ids: [other.accountId] });
    const unknown = await s.a.post(`/email/campaigns/${c.id}/submit`, { email: 'nobody@example.com' });
    assert.equal(unknown.statusCode, 422);
    assert.equal(unknown.json().error.details[0].field, 'email');
    const none = await s.a.post(`/email/campaigns/${c.id}/submit`, {});
    assert.equal(none.statusCode, 422);
    const bad = await s.a.post(`/email/campaigns/${c.id}/submit`, { email: 'x@example.com', event_name: 'email.sent' });
    assert.equal(bad.statusCode, 422);
    assert.equal(bad.json().error.details[0].field, 'event_name');
    for (const id of [theirs.id, '00000000-0000-0000-0000-000000000000', 'not-a-uuid']) {
      const res = await s.a.post(`/email/campaigns/${id}/submit`, { email: 'x@example.com' });
      assert.equal(res.statusCode, 404, id);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
    await s.a.post('/email/contacts/upsert', { email: 'k@example.com' });
    const ingested = await s.a.post('/email/events', { event_name: 'lead.created', email: 'k@example.com', idempotency_key: 'shared' });
    assert.equal(ingested.statusCode, 202);
    const reused = await s.a.post(`/email/campaigns/${c.id}/submit`, { email: 'k@example.com', idempotency_key: 'shared' });
    assert.equal(reused.statusCode, 409);
    assert.equal(reused.json().error.code, 'CONFLICT');
  });
});
