// A message whose render runs over a cap or its time budget fails with the
// reason in its log row (and the event's decisions show it), and the next
// message of the same campaign is still sent to the real SMTP sink (issue 12).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closeTransports } from '../../src/mail/send.ts';
import { DEFAULT_RENDER_LIMITS } from '../../src/lib/render-limits.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { createCampaign, drain, eventsNamed, sendLog, setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';

describe('sending: render caps fail one message, the campaign goes on', () => {
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

  // Accepted at create (the trial render has no first name); costly only for some contacts.
  const content =
    '<html><body><p>Hi {{ contact.first_name }}</p>' +
    '{% if contact.first_name == "Range" %}{% for i in (1..100000000) %}{% endfor %}{% endif %}' +
    '{% if contact.first_name == "Slow" %}{% for i in (1..5000000) %}{% assign x = i | plus: 1 %}{% endfor %}{% endif %}' +
    '</body></html>';

  for (const [who, reason, config] of [
    ['Range', /template did not render: content: template uses a range of 100000000 items/, {}],
    // A loop cap high enough that the 200 ms budget runs out first.
    ['Slow', /template did not render: content: template took longer than its render budget/, { render: { ...DEFAULT_RENDER_LIMITS, renderBudgetMs: 200, maxLoopIterations: 50_000_000 } }],
  ] as const) {
    test(`${who}: that message fails with the reason, the next one is sent`, async () => {
      const s = await setup(t, sink.port, { content });
      await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
      const before = sink.messages.length;
      assert.equal((await s.a.post('/email/contacts/upsert', { email: 'bad@example.com', first_name: who })).statusCode, 200);
      assert.equal((await s.a.post('/email/contacts/upsert', { email: 'good@example.com', first_name: 'Grace' })).statusCode, 200);
      const started = performance.now();
      await drain(t, { config });
      assert.ok(performance.now() - started < 30_000);
      await sink.waitFor(before + 1);

      const rows = await sendLog(t, s.teamId);
      const bad = rows.find((r) => r.email === 'bad@example.com')!;
      const good = rows.find((r) => r.email === 'good@example.com')!;
      assert.equal(bad.status, 'failed');
      assert.match(bad.last_error!, reason);
      assert.equal(good.status, 'sent');
      assert.equal(sink.messages.length, before + 1);
      assert.deepEqual(sink.messages[before]!.to, ['good@example.com']);

      // The event's decision shows the send and its failure.
      const saved = (await eventsNamed(t, s.teamId, 'contact.saved')).find((e) => (e.payload as { email?: string }).email === 'bad@example.com')!;
      const decisions = (await s.a.get(`/email/events/${saved.id}/decisions`)).json().decisions;
      assert.deepEqual(decisions.map((d: { send_status: string; email_send_log_id: string }) => [d.send_status, d.email_send_log_id]), [['failed', bad.id]]);
    });
  }

  test('a template stored before the Liquid parts cap and over it: its messages fail with the reason, nothing is sent', async () => {
    const s = await setup(t, sink.port, { content: '<p>Hi {{ contact.first_name }}</p>' });
    // Written as an older version could have stored it: create refuses it now.
    const over = '<p>{{ contact.first_name }}</p>'.repeat(30_000); // 60,000 parts, 930 KB
    await t.database.db.updateTable('templates').set({ content: over, updated_at: new Date() }).where('id', '=', s.templateId).execute();
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const before = sink.messages.length;
    assert.equal((await s.a.post('/email/contacts/upsert', { email: 'over@example.com', first_name: 'Ada' })).statusCode, 200);
    await drain(t);
    const [row] = await sendLog(t, s.teamId);
    assert.equal(row!.status, 'failed');
    assert.match(row!.last_error!, /template did not render: content: template has more than 50000 Liquid parts/);
    assert.equal(sink.messages.length, before);
  });
});
