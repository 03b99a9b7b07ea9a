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

  /** Three contacts saved in one bulk request: one decision batch, one send job of three messages (so slots are reserved). */
  async function sendThree(s: Setup, emails: string[]): Promise<void> {
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const res = await s.a.post('/email/contacts/bulk-upsert', { contacts: emails.map((email) => ({ email })) });
    assert.equal(res.statusCode, 200, res.body);
    await drain(t);
  }

  test('a slow claim: RCPT TO goes out before it has committed, the message only after', async () => {
    const s = await setup(t, sink.port);
    await sendThree(s, ['slow@example.com', 'quick1@example.com', 'quick2@example.com']);
    const log = await sendLog(t, s.teamId);
    assert.deepEqual(log.map((l) => l.status), ['sent', 'sent', 'sent']);
    const { rows } = await sql<{ at: Date }>`SELECT at FROM claim_hold_log WHERE email = 'slow@example.com'`.execute(t.database.db);
    assert.equal(rows.length, 1);
    const claimed = rows[0]!.at.getTime();
    const rcpt = sink.rcptLog.filter((r) => r.address === 'slow@example.com');
    const arrived = sink.messages.filter((m) => m.to.includes('slow@example.com'));
    assert.equal(rcpt.length, 1);
    assert.equal(arrived.length, 1, 'delivered once');
    // The claim slept 600 ms before this moment: an envelope sent after it (claim first, as before) would be later.
    assert.ok(rcpt[0]!.at < claimed - 300, `RCPT TO ${claimed - rcpt[0]!.at} ms before the claim ended`);
    assert.ok(arrived[0]!.at >= claimed, `the message ${arrived[0]!.at - claimed} ms after the claim ended`);
  });

  test('a claim that fails after the envelope: the relay gets no message, the message stays queued, the batch goes on', async () => {
    const s = await setup(t, sink.port);
    await sendThree(s, ['gone@example.com', 'stay1@example.com', 'stay2@example.com']);
    const log = await sendLog(t, s.teamId);
    const byEmail = Object.fromEntries(log.map((l) => [l.email, l.status]));
    assert.deepEqual(byEmail, { 'gone@example.com': 'queued', 'stay1@example.com': 'sent', 'stay2@example.com': 'sent' });
    assert.ok(sink.rcptAttempts.includes('gone@example.com'), 'its envelope went out while the claim ran');
    assert.equal(sink.messages.filter((m) => m.to.includes('gone@example.com')).length, 0, 'not delivered');
    // The account's connections still work: another message of the team is delivered.
    const again = await s.a.post('/email/contacts/bulk-upsert', { contacts: [{ email: 'stay3@example.com' }] });
    assert.equal(again.statusCode, 200, again.body);
    await drain(t);
    assert.equal(sink.messages.filter((m) => m.to.includes('stay3@example.com')).length, 1);
  });
});
