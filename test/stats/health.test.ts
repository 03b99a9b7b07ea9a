// Mail-account health: the 24-hour bounce and complaint rates from the
// statistics against the thresholds; a change of state is stored and emitted
// once as email.account.health (to the account's team), the same state again
// emits nothing, too little mail is `ok`, and a window that empties returns to
// `ok`. Webhooks can subscribe to the event.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { recordResults, type SendResult } from '../../src/mail/send-record.ts';
import { applyFeedback } from '../../src/inbound/feedback.ts';
import { checkAccountHealth, healthState } from '../../src/stats/health.ts';
import { foldStats } from '../../src/stats/fold.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';

const config = testConfig();

describe('mail-account health', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  async function account(teamId: string, email: string): Promise<string> {
    const a = await t.database.db.insertInto('mail_accounts').values({
      team_id: teamId, host: '127.0.0.1', port: 2525, security: 'none', from_email: email, daily_limit: 100_000, status: 'active',
    } as any).returning('id').executeTakeFirstOrThrow();
    return a.id;
  }

  /** `sent` accepted and `hard` refused messages of the account; returns the accepted ones' ids. */
  async function send(teamId: string, accountId: string, sent: number, hard: number): Promise<string[]> {
    const { rows } = await sql<{ id: string; email: string }>`
      INSERT INTO email_send_log (team_id, mail_account_id, email, status, source, attempts, queued_at, created_at, updated_at)
      SELECT ${teamId}::uuid, ${accountId}::uuid, 'h' || g || '.' || ${accountId} || '@health.example.com', 'sending', 'transactional', 1, now(), now(), now()
        FROM generate_series(1, ${sent + hard}) g
      RETURNING id, email`.execute(t.database.db);
    const results: SendResult[] = rows.map((r, i) => ({
      row: { id: r.id, team_id: teamId, campaign_id: null, campaign_send_id: null, contact_id: null, email: r.email, attempts: 1, source: 'transactional' },
      outcome: i < sent ? { kind: 'sent', response: '250 OK' } : { kind: 'hard', response: '550 5.1.1 unknown user' },
      messageId: `<${r.id}@x>`, subject: 'Hi', accountId,
    }));
    await recordResults(t.database.db, config, results);
    return rows.slice(0, sent).map((r) => r.id);
  }

  const healthEvents = async (teamId: string) =>
    (await sql<{ payload: any }>`SELECT payload FROM events WHERE team_id = ${teamId}::uuid AND name = 'email.account.health' ORDER BY id`.execute(t.database.db)).rows.map((r) => r.payload);

  test('the thresholds: 2 % / 5 % bounces, 0.1 % / 0.3 % complaints, nothing below 50 messages', () => {
    assert.equal(healthState(1000, 1.99, 0.09), 'ok');
    assert.equal(healthState(1000, 2, 0), 'warning');
    assert.equal(healthState(1000, 0, 0.1), 'warning');
    assert.equal(healthState(1000, 5, 0), 'critical');
    assert.equal(healthState(1000, 0, 0.3), 'critical');
    assert.equal(healthState(49, 50, 10), 'ok');
    assert.equal(healthState(50, 50, null), 'critical');
  });

  test('ok -> warning -> critical -> ok, each change stored and emitted once to the account\'s team', async () => {
    const { teamId, key } = await makeTeam(t.database.db);
    const { teamId: otherTeam } = await makeTeam(t.database.db);
    const acc = await account(teamId, 'news@health.example.com');
    const quiet = await account(otherTeam, 'few@health.example.com');

    // A webhook may subscribe to the event.
    const hook = await t.app.inject({
      method: 'POST', url: '/public/v1/webhooks', headers: { 'x-api-key': key },
      payload: { url: 'http://127.0.0.1:9/hook', events: ['email.account.health'] },
    });
    assert.equal(hook.statusCode, 201, hook.body);

    // 97 accepted, 3 refused: 3 % bounces.
    const accepted = await send(teamId, acc, 97, 3);
    // The other team's account: 20 messages, half bounced, too few to judge.
    await send(otherTeam, quiet, 10, 10);
    let changes = await checkAccountHealth(t.database.db);
    assert.deepEqual(changes.map((c) => [c.mail_account_id, c.state]), [[acc, 'warning']]);
    let events = await healthEvents(teamId);
    assert.deepEqual(events, [{
      mail_account_id: acc, from_email: 'news@health.example.com', window_hours: 24,
      bounce_rate: 3, complaint_rate: 0, state: 'warning', previous_state: 'ok',
    }]);
    assert.deepEqual(await healthEvents(otherTeam), []);
    const row = await t.database.db.selectFrom('mail_accounts').select('health_state').where('id', '=', acc).executeTakeFirstOrThrow();
    assert.equal(row.health_state, 'warning');

    // The same state again: nothing emitted (also after the deltas are folded).
    await foldStats(t.database.db);
    assert.deepEqual(await checkAccountHealth(t.database.db), []);
    assert.equal((await healthEvents(teamId)).length, 1);

    // One complaint among 97 reached: 1.03 % -> critical.
    const r = await applyFeedback(t.database.db, [{ message_id: accepted[0]!, kind: 'complaint' }]);
    assert.deepEqual(r.outcomes, ['applied']);
    changes = await checkAccountHealth(t.database.db);
    assert.deepEqual(changes.map((c) => c.state), ['critical']);
    events = await healthEvents(teamId);
    assert.equal(events.length, 2);
    assert.equal(events[1].complaint_rate, 1.03);
    assert.equal(events[1].previous_state, 'warning');

    // A day later the window is empty: back to ok, announced.
    await sql`UPDATE stats_buckets SET bucket = bucket - interval '25 hours' WHERE mail_account_id = ${acc}::uuid`.execute(t.database.db);
    await sql`UPDATE stats_deltas SET bucket = bucket - interval '25 hours' WHERE mail_account_id = ${acc}::uuid`.execute(t.database.db);
    changes = await checkAccountHealth(t.database.db);
    assert.deepEqual(changes.map((c) => [c.state, c.bounce_rate]), [['ok', null]]);
    assert.equal((await healthEvents(teamId)).length, 3);
    assert.deepEqual(await checkAccountHealth(t.database.db), []);
  });
});
