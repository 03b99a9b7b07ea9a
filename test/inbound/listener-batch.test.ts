// The inbound listener classifies the messages that arrive together in one
// pool task per team (one task a message made the pool's round trip the
// limit); a batch that fails the pool is classified again one message at a
// time, so a message over its budget fails only itself (451, the sender
// retries) and the others of its batch are recorded.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import nodemailer from 'nodemailer';
import pino from 'pino';
import { returnPathAddress } from '../../src/inbound/address.ts';
import { startInboundListener, type InboundListener } from '../../src/inbound/listener.ts';
import type { ClassifyInput } from '../../src/inbound/parse-task.ts';
import { untrustedPool, UntrustedWorkError, type UntrustedPool } from '../../src/untrusted/pool.ts';
import { createTestDatabase, makeTeam, testConfig, type TestDatabase } from '../helpers.ts';

const DOMAIN = 'bounces.plover.test';
const POISON = 'X-Test-Poison: yes';

describe('inbound listener: classification in batches', () => {
  let d: TestDatabase;
  let listener: InboundListener;
  const calls: { name: string; n: number }[] = [];
  let failBatches = false;
  const config = testConfig();
  const secret = config.appSecret!;

  before(async () => {
    d = await createTestDatabase();
    const real = untrustedPool();
    // The real pool, counted; it can be told to fail batches, and fails a poisoned message alone.
    const pool = {
      run: async (name: string, input: unknown, budget: number, team: string) => {
        const inputs = (name === 'classifyInboundBatch' ? input : [input]) as ClassifyInput[];
        calls.push({ name, n: inputs.length });
        const poisoned = inputs.some((i) => Buffer.from(i.raw).toString('latin1').includes(POISON));
        if (poisoned && (name === 'classifyInbound' || failBatches)) throw new UntrustedWorkError('timeout', `took longer than ${budget} ms`);
        return real.run(name, input, budget, team);
      },
    } as unknown as UntrustedPool;
    const inbound = { ...config.inbound, domain: DOMAIN, smtpPort: 0, smtpHost: '127.0.0.1' };
    listener = await startInboundListener({ db: d.db, config: testConfig({ inbound }), log: pino({ level: 'silent' }), pool });
  });
  after(async () => {
    await listener.close();
    await d.drop();
  });

  async function dsns(n: number, poisonAt = -1) {
    const { teamId } = await makeTeam(d.db);
    const { rows } = await sql<{ id: string }>`
      INSERT INTO email_send_log (team_id, email, status, source, sent_at)
      SELECT ${teamId}, 'r' || g || '@example.com', 'sent', 'transactional', now() FROM generate_series(1, ${n}) g RETURNING id`.execute(d.db);
    await sql`UPDATE email_send_log SET message_id = id || '@news.plover.test' WHERE team_id = ${teamId}`.execute(d.db);
    const template = readFileSync(new URL('../fixtures/inbound/postfix-hard-5.1.1.eml', import.meta.url), 'latin1');
    return rows.map((r, i) => ({
      id: r.id,
      to: returnPathAddress(secret, DOMAIN, r.id),
      raw: (i === poisonAt ? `${POISON}\r\n` : '') + template.replaceAll('@@MESSAGE_ID@@', `${r.id}@news.plover.test`),
    }));
  }

  /** Delivers every message at once over one connection each; the server's answer per message. */
  async function deliverAll(list: { to: string; raw: string }[]): Promise<string[]> {
    const client = nodemailer.createTransport({ host: '127.0.0.1', port: listener.port, secure: false, ignoreTLS: true, pool: true, maxConnections: list.length });
    try {
      return await Promise.all(list.map((m) => client.sendMail({ envelope: { from: '', to: [m.to] }, raw: m.raw }).then(
        (info) => String(info.response), (err: { response?: string }) => String(err.response))));
    } finally {
      client.close();
    }
  }
  const status = async (id: string) => (await sql<{ status: string }>`SELECT status FROM email_send_log WHERE id = ${id}`.execute(d.db)).rows[0]!.status;

  test('messages arriving together share a pool task; each is recorded', async () => {
    const list = await dsns(20);
    calls.length = 0;
    const answers = await deliverAll(list);
    assert.ok(answers.every((a) => a.startsWith('250')), answers.join(' | '));
    for (const m of list) assert.equal(await status(m.id), 'bounced_hard');
    assert.equal(calls.reduce((s, c) => s + c.n, 0), 20, 'every message classified once');
    assert.ok(calls.some((c) => c.name === 'classifyInboundBatch' && c.n > 1), JSON.stringify(calls));
    assert.ok(calls.length < 20, `${calls.length} pool tasks for 20 messages`);
  });

  test('a batch that fails the pool is classified one by one: only the message over its budget fails (451)', async () => {
    const list = await dsns(10, 3);
    calls.length = 0;
    failBatches = true;
    try {
      const answers = await deliverAll(list);
      assert.match(answers[3]!, /^451/);
      answers.forEach((a, i) => i !== 3 && assert.match(a, /^250/, `message ${i}: ${a}`));
      for (const [i, m] of list.entries()) assert.equal(await status(m.id), i === 3 ? 'sent' : 'bounced_hard');
      assert.ok(calls.some((c) => c.name === 'classifyInboundBatch' && c.n > 1), JSON.stringify(calls));
    } finally {
      failBatches = false;
    }
  });
});
