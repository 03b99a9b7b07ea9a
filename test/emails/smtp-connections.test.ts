// A pooled SMTP connection carries SMTP_MESSAGES_PER_CONNECTION messages, then
// the pool opens a new one: relays cap messages per connection (some at 25 or
// 50) and answer a message past the cap with a temporary refusal, a deferral
// for us. Sent one after another, six messages take one connection by default
// and three with a cap of 2, and the relay never sees more on one.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { SMTPServer } from 'smtp-server';
import { loadConfig } from '../../src/config.ts';
import { closeTransports, sendEmailTask } from '../../src/mail/send.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { txSetup } from './fixtures.ts';

/** A relay that counts messages per connection. */
async function countingRelay() {
  const perConnection = new Map<string, number>();
  const server = new SMTPServer({
    secure: false, disabledCommands: ['STARTTLS', 'AUTH'], authOptional: true, logger: false, closeTimeout: 100,
    onData(stream, session, callback) {
      stream.on('data', () => {});
      stream.on('end', () => {
        perConnection.set(session.id, (perConnection.get(session.id) ?? 0) + 1);
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    port: (server.server.address() as AddressInfo).port,
    counts: () => [...perConnection.values()],
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(async () => {
  closeTransports();
  await t.close();
});

async function sendSix(perConnection: number | undefined): Promise<number[]> {
  const relay = await countingRelay();
  try {
    const s = await txSetup(t, relay.port);
    const emails = Array.from({ length: 6 }, (_, i) => ({ template_id: s.templateId, mail_account_id: s.accountId, to_email: `p${i}@example.com`, variables: { order_id: i } }));
    const res = await s.c.post('/email/emails/batch', { emails });
    assert.equal(res.statusCode, 202, res.body);
    const ids: string[] = res.json().emails.map((e: { id: string }) => e.id);
    await sql`DELETE FROM graphile_worker._private_jobs`.execute(t.database.db); // sent here, one at a time
    const config = perConnection === undefined ? testConfig() : testConfig({ smtpMessagesPerConnection: perConnection });
    const task = sendEmailTask({ db: t.database.db, config }) as (p: unknown) => Promise<void>;
    for (const id of ids) await task({ email_send_log_ids: [id] });
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM email_send_log WHERE id = ANY (${ids}::uuid[]) AND status = 'sent'`.execute(t.database.db);
    assert.equal(rows[0]!.n, 6, 'all six sent');
    return relay.counts().sort((a, b) => a - b);
  } finally {
    closeTransports();
    await relay.close();
  }
}

test('by default a connection carries all six; with a cap of 2 three connections carry two each', async () => {
  assert.deepEqual(await sendSix(undefined), [6]);
  assert.deepEqual(await sendSix(2), [2, 2, 2]);
});

test('SMTP_MESSAGES_PER_CONNECTION: 100 by default, 1 to 100,000, named in the error', () => {
  const env = { DATABASE_URL: 'postgres://127.0.0.1/x', APP_SECRET: 'a'.repeat(64) };
  assert.equal(loadConfig(env).smtpMessagesPerConnection, 100);
  assert.equal(loadConfig({ ...env, SMTP_MESSAGES_PER_CONNECTION: '50' }).smtpMessagesPerConnection, 50);
  assert.throws(() => loadConfig({ ...env, SMTP_MESSAGES_PER_CONNECTION: '0' }), /SMTP_MESSAGES_PER_CONNECTION must be between 1 and 100000/);
  assert.throws(() => loadConfig({ ...env, SMTP_MESSAGES_PER_CONNECTION: 'many' }), /SMTP_MESSAGES_PER_CONNECTION must be an integer/);
});
