// A message of a send job with reserved daily slots: its SMTP envelope goes out
// while its claim commits, and its bytes only once the claim has committed
// (src/mail/send.ts, HOLD_OPTION). A claim that fails drops the connection in
// the middle of DATA: nothing is delivered, the message stays queued, the rest
// of the batch goes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { createCampaign, drain, sendLog, setup, type Setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';

describe('the claim of a batch message and its SMTP envelope', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    t = await buildTestApp();
    sink = await startCaptureSink();
    // The claim (`queued` → `sending`) of an address starting `slow` takes 600 ms
    // and notes when it ended; one starting `gone` is refused after 300 ms, as
    // if another worker had taken or a cancel had ended the message meanwhile.
    await sql`CREATE TABLE claim_hold_log (email text, at timestamptz)`.execute(t.database.db);
    await sql`
      CREATE FUNCTION claim_hold() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.status = 'sending' AND OLD.status <> 'sending' THEN
          IF NEW.email LIKE 'slow%' THEN
            PERFORM pg_sleep(0.6);
            INSERT INTO claim_hold_log VALUES (NEW.email, clock_timestamp());
          ELSIF NEW.email LIKE 'gone%' THEN
            PERFORM pg_sleep(0.3);
            RETURN NULL;
          END IF;
        END IF;
        RETURN NEW;
      END $$`.execute(t.database.db);
    await sql`CREATE TRIGGER claim_hold BEFORE UPDATE ON email_send_log FOR EACH ROW EXECUTE FUNCTION claim_hold()`.execute(t.database.db);
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  /** Contacts saved in one bulk request: one decision batch, one send job of all their messages (so slots are reserved). */
  async function sendBatch(s: Setup, emails: string[]): Promise<void> {
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const res = await s.a.post('/email/contacts/bulk-upsert', { contacts: emails.map((email) => ({ email })) });
    assert.equal(res.statusCode, 200, res.body);
    await drain(t);
  }

  test('a slow claim: RCPT TO goes out before it has committed, the message only after', async () => {
    const s = await setup(t, sink.port);
    await sendBatch(s, ['slow@example.com', 'quick1@example.com', 'quick2@example.com']);
    const log = await sendLog(t, s.teamId);
    assert.deepEqual(log.map((l) => l.status), ['sent', 'sent', 'sent']);
    const { rows } = await sql<{ at: Date }>`SELECT at FROM claim_hold_log WHERE email = 'slow@example.com'`.execute(t.database.db);
    assert.equal(rows.length, 1);
    const claimed = rows[0]!.at.getTime();
    const rcpt = sink.rcptLog.filter((r) => r.address === 'slow@example.com');
    const arrived = sink.messages.filter((m) => m.to.includes('slow@example.com'));
    assert.equal(rcpt.length, 1);
    assert.equal(arrived.length, 1, 'delivered once');
    // The claim slept 600 ms before this moment: an envelope sent after it (claim first, as before) comes later.
    assert.ok(rcpt[0]!.at < claimed, `RCPT TO ${claimed - rcpt[0]!.at} ms before the claim ended`);
    assert.ok(arrived[0]!.at >= claimed, `the message ${arrived[0]!.at - claimed} ms after the claim ended`);
  });

  test("after a held claim fails, the job's next messages claim first: of seven refused messages only the first five send an envelope", async () => {
    const s = await setup(t, sink.port);
    const emails = Array.from({ length: 7 }, (_, i) => `gone-batch${i}@example.com`);
    await sendBatch(s, emails);
    assert.deepEqual((await sendLog(t, s.teamId)).map((l) => l.status), Array(7).fill('queued'));
    const enveloped = new Set(sink.rcptAttempts.filter((a) => a.startsWith('gone-batch')));
    // Five connections: five held at once; the other two start after the first refusal and claim first, with no SMTP.
    assert.ok(enveloped.size >= 1 && enveloped.size <= 5, `${enveloped.size} of 7 sent an envelope`);
    assert.equal(sink.messages.filter((m) => m.to.some((a) => a.startsWith('gone-batch'))).length, 0);
  });

  test('a claim that fails after the envelope: the relay gets no message, the message stays queued, the batch goes on', async () => {
    const s = await setup(t, sink.port);
    await sendBatch(s, ['gone@example.com', 'stay1@example.com', 'stay2@example.com']);
    const log = await sendLog(t, s.teamId);
    const byEmail = Object.fromEntries(log.map((l) => [l.email, l.status]));
    assert.deepEqual(byEmail, { 'gone@example.com': 'queued', 'stay1@example.com': 'sent', 'stay2@example.com': 'sent' });
    assert.ok(sink.rcptAttempts.includes('gone@example.com'), 'its envelope went out while the claim ran');
    assert.equal(sink.messages.filter((m) => m.to.includes('gone@example.com')).length, 0, 'not delivered');
    // The account's connections still work: the team's next batch (two messages, so sent held again) is delivered.
    const again = await s.a.post('/email/contacts/bulk-upsert', { contacts: [{ email: 'stay3@example.com' }, { email: 'stay4@example.com' }] });
    assert.equal(again.statusCode, 200, again.body);
    await drain(t);
    for (const email of ['stay3@example.com', 'stay4@example.com']) assert.equal(sink.messages.filter((m) => m.to.includes(email)).length, 1, email);
  });
});
