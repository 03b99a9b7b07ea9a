// Every reason on the suppression list against every send path, with a real
// SMTP sink on 127.0.0.1: transactional submit and batch (stopped by all but
// an unsubscribe), campaign decisions (submit and trigger events; stopped by
// every reason, even when the contact's status says `active`), and the send
// task's check of messages queued before the entry was added. The entries are
// written straight into the table, so the contact stays `active` and only the
// list can stop the mail; erased entries are the keyed hash alone.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { emailHmac, suppress, type SuppressionReason } from '../../src/contacts/suppressions.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { createCampaign, drain, sendLog, setup, type Setup } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';

const REASONS: SuppressionReason[] = ['unsubscribed', 'soft_bounce', 'manual', 'bounced_hard', 'complained', 'erased'];
/** The campaign decision's skip reason for each list reason. */
const SKIP: Record<SuppressionReason, string> = {
  unsubscribed: 'unsubscribed', bounced_hard: 'bounced', complained: 'complained', soft_bounce: 'suppressed', manual: 'suppressed', erased: 'suppressed',
};

let t: TestApp;
let sink: CaptureSink;
before(async () => {
  t = await buildTestApp();
  sink = await startCaptureSink();
});
after(async () => {
  closeTransports();
  await sink.close();
  await t?.close();
});

const atSink = (to: string) => sink.messages.filter((m) => m.to.includes(to));
let n = 0;
const address = (reason: string) => `${reason.replace('_', '-')}-${process.pid}-${n++}@example.com`;

/** Puts the address on the team's list with this reason, leaving any contact as it is. */
async function list(teamId: string, email: string, reason: SuppressionReason): Promise<void> {
  if (reason === 'erased') {
    await t.database.db.insertInto('suppressions')
      .values({ team_id: teamId, email: null, email_hmac: emailHmac(t.app.deps.config.appSecret!, email), reason: 'erased', reasons: ['erased'] })
      .execute();
  } else {
    await suppress(t.database.db, [{ team_id: teamId, email, reason }]);
  }
}

async function upsert(s: Setup, email: string): Promise<string> {
  const res = await s.a.post('/email/contacts/upsert', { email });
  assert.equal(res.statusCode, 200, res.body);
  return res.json().contact.id;
}

describe('transactional mail: every reason but an unsubscribe stops it', () => {
  for (const reason of REASONS) {
    test(`${reason}: submit and batch`, async () => {
      const s = await setup(t, sink.port);
      const email = address(reason);
      await list(s.teamId, email, reason);
      const body = { template_id: s.templateId, mail_account_id: s.accountId, to_email: email.toUpperCase() };
      const submit = await s.a.post('/email/emails/submit', body);
      const batch = await s.a.post('/email/emails/batch', { emails: [body, { ...body, to_email: `ok-${email}` }] });
      assert.equal(batch.statusCode, 202, batch.body);
      if (reason === 'unsubscribed') {
        assert.equal(submit.statusCode, 202, submit.body);
        assert.deepEqual(batch.json().emails.map((e: any) => e.status), ['queued', 'queued']);
      } else {
        assert.equal(submit.statusCode, 422, submit.body);
        assert.equal(submit.json().error.code, 'RECIPIENT_SUPPRESSED');
        assert.deepEqual(submit.json().error.details.map((d: any) => d.field), ['to_email']);
        assert.deepEqual(batch.json().emails.map((e: any) => e.status), ['suppressed', 'queued']);
      }
      await drain(t);
      assert.equal(atSink(email).length, reason === 'unsubscribed' ? 2 : 0);
      assert.equal(atSink(`ok-${email}`).length, 1, 'the other item of the batch went');
    });
  }
});

describe('campaign mail: every reason stops it, whatever the contact status says', () => {
  for (const reason of REASONS) {
    test(`${reason}: submit decides skip`, async () => {
      const s = await setup(t, sink.port);
      const c = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['lead.created'] });
      const email = address(reason);
      await upsert(s, email);
      await list(s.teamId, email, reason);
      const res = await s.a.post(`/email/campaigns/${c.id}/submit`, { email });
      assert.equal(res.statusCode, 202, res.body);
      assert.deepEqual([res.json().decision.decision, res.json().decision.reason], ['skip', SKIP[reason]]);
      const control = address('control');
      await upsert(s, control);
      const sent = await s.a.post(`/email/campaigns/${c.id}/submit`, { email: control });
      assert.equal(sent.json().decision.decision, 'send', 'a contact off the list is sent to');
      await drain(t);
      assert.equal(atSink(email).length, 0);
      assert.equal(atSink(control).length, 1);
      const contact = await t.database.db.selectFrom('contacts').select('status').where('team_id', '=', s.teamId).where('email', '=', email).executeTakeFirstOrThrow();
      assert.equal(contact.status, 'active', 'the list alone stopped it');
    });
  }

  test('trigger events (the worker path) skip manual and erased entries too', async () => {
    const s = await setup(t, sink.port);
    const c = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['lead.created'] });
    const manual = address('manual');
    const erased = address('erased');
    const control = address('control');
    for (const e of [manual, erased, control]) await upsert(s, e);
    await list(s.teamId, manual, 'manual');
    await list(s.teamId, erased, 'erased');
    const ids: Record<string, string> = {};
    for (const e of [manual, erased, control]) {
      const res = await s.a.post('/email/events', { event_name: 'lead.created', email: e });
      assert.equal(res.statusCode, 202, res.body);
      ids[e] = res.json().event_id;
    }
    await drain(t);
    for (const [e, want] of [[manual, ['skip', 'suppressed']], [erased, ['skip', 'suppressed']], [control, ['send', null]]] as const) {
      const d = (await s.a.get(`/email/events/${ids[e]}/decisions`)).json().decisions;
      assert.deepEqual(d.map((x: any) => [x.campaign_id, x.decision, x.reason]), [[c.id, ...want]], e);
    }
    assert.deepEqual((await sendLog(t, s.teamId)).map((r) => r.email), [control]);
  });
});

describe('the send task checks the list again before sending', () => {
  for (const reason of REASONS) {
    test(`${reason}: messages queued before the entry was added`, async () => {
      const s = await setup(t, sink.port);
      const c = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], events: ['lead.created'] });
      const email = address(reason);
      await upsert(s, email);
      const decided = await s.a.post(`/email/campaigns/${c.id}/submit`, { email });
      assert.equal(decided.json().decision.decision, 'send');
      const tx = await s.a.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: email });
      assert.equal(tx.statusCode, 202, tx.body);
      await list(s.teamId, email, reason);
      await drain(t);
      const log = await sendLog(t, s.teamId);
      const campaign = log.find((r) => r.source === 'campaign')!;
      const transactional = log.find((r) => r.source === 'transactional')!;
      assert.equal(campaign.status, 'cancelled');
      assert.equal(campaign.last_error, `address suppressed (${reason})`);
      if (reason === 'unsubscribed') {
        assert.equal(transactional.status, 'sent');
        assert.equal(atSink(email).length, 1, 'the transactional message alone');
      } else {
        assert.equal(transactional.status, 'suppressed');
        assert.equal(transactional.last_error, `address suppressed (${reason})`);
        assert.equal(atSink(email).length, 0);
      }
    });
  }
});
