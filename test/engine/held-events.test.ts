// The campaign decider loop (campaigns/decider.ts) against rows other
// transactions hold. Waiting events held by another transaction (a job marking
// them processed) are passed over and decided once their holder lets go. A
// batch that waits for a row lock (a session stuck in its transaction, holding
// the team's mail account) gives up after the loop's lock timeout and its team
// backs off; other teams' events are decided meanwhile, and the stuck team's
// once the lock is free.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { CampaignDecider } from '../../src/campaigns/decider.ts';
import { decideBatch, decideLockKey } from '../../src/campaigns/engine.ts';
import { createDb, createPool } from '../../src/db/pool.ts';
import { sql } from 'kysely';
import { closeTransports } from '../../src/mail/send.ts';
import { decideOptions } from '../../src/tasks.ts';
import { buildTestApp, testConfig, type TestApp, until } from '../helpers.ts';
import { createCampaign, drain, sendLog, setup, type Setup } from './fixtures.ts';
import { startCaptureSink, type CaptureSink } from './sink.ts';

describe('decider loop: rows held by other transactions', () => {
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

  const errors: { msg: string; team_id?: string }[] = [];
  const log = pino({ level: 'error' }, { write: (line: string) => void errors.push(JSON.parse(line)) });
  function decider(lockTimeoutMs?: number): CampaignDecider {
    return new CampaignDecider({ db: t.database.db, decide: decideOptions({ db: t.database.db, config: testConfig() }), log, pollMs: 20, lockTimeoutMs });
  }
  const decided = async (s: Setup) =>
    Number((await t.database.pool.query('SELECT count(*) AS n FROM events WHERE team_id = $1 AND decided_at IS NOT NULL AND processed_at IS NOT NULL', [s.teamId])).rows[0].n);
  async function campaignTeam(): Promise<Setup> {
    const s = await setup(t, sink.port);
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    return s;
  }

  test('passes over waiting events another transaction holds; decides them once it lets go', { timeout: 60_000 }, async () => {
    const s = await campaignTeam();
    const up = await s.a.post('/email/contacts/upsert', { email: 'held@example.com' });
    assert.equal(up.statusCode, 200, up.body);
    const holder = await t.database.pool.connect();
    errors.length = 0;
    // A short lock timeout: a decider that waited for the held row instead of passing over it would fail here.
    const d = decider(300);
    try {
      await holder.query('BEGIN');
      // The lock a job marking its events processed holds (the weakest that makes the decider skip a row).
      const held = await holder.query('SELECT id FROM events WHERE team_id = $1 AND decided_at IS NULL FOR NO KEY UPDATE', [s.teamId]);
      assert.equal(held.rowCount, 1);
      d.start();
      await sleep(1_000);
      assert.equal(await decided(s), 0, 'held: not decided');
      assert.deepEqual(errors, [], 'passing over a held row is no failure (and no lock wait)');
      await holder.query('ROLLBACK');
      await until('the event to be decided', async () => (await decided(s)) === 1, 5_000);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
      await d.stop();
    }
    await drain(t);
    assert.deepEqual((await sendLog(t, s.teamId)).map((l) => [l.email, l.status]), [['held@example.com', 'sent']]);
  });

  test('a batch stuck on a lock holds back its team only, gives up after the lock timeout, and the team is decided once the lock is free', { timeout: 60_000 }, async () => {
    const stuck = await campaignTeam();
    const free = await campaignTeam();
    errors.length = 0;
    const holder = await t.database.pool.connect();
    const d = decider(8_000);
    try {
      await holder.query('BEGIN');
      // A session that holds the team's mail account (the decider locks it to count the day's sends).
      await holder.query('SELECT id FROM mail_accounts WHERE id = $1 FOR UPDATE', [stuck.accountId]);
      assert.equal((await stuck.a.post('/email/contacts/upsert', { email: 'stuck@example.com' })).statusCode, 200);
      d.start();
      await until('a batch waiting for the lock', async () =>
        (await t.database.pool.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rowCount! > 0, 5_000);
      // While that batch waits, the other lane goes on: another team's new event is decided.
      assert.equal((await free.a.post('/email/contacts/upsert', { email: 'free@example.com' })).statusCode, 200);
      await until("the other team's event to be decided", async () => (await decided(free)) === 1, 7_000);
      assert.deepEqual(errors.filter((e) => e.team_id === stuck.teamId), [], 'decided while the stuck batch still waited, not after it gave up');
      assert.ok((await t.database.pool.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rowCount! > 0,
        'the stuck batch still waits');
      assert.equal(await decided(stuck), 0);
      await until('the stuck batch to give up', async () => errors.some((e) => e.team_id === stuck.teamId), 10_000);
      assert.match(errors.find((e) => e.team_id === stuck.teamId)!.msg, /deciding a batch failed; the team's events are retried in 1000 ms/);
      await holder.query('ROLLBACK');
      await until("the stuck team's event to be decided after its backoff", async () => (await decided(stuck)) === 1, 10_000);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
      await d.stop();
    }
    await drain(t);
    assert.deepEqual((await sendLog(t, stuck.teamId)).map((l) => [l.email, l.status]), [['stuck@example.com', 'sent']]);
    assert.deepEqual((await sendLog(t, free.teamId)).map((l) => [l.email, l.status]), [['free@example.com', 'sent']]);
  });

  test('a team found busy after its failure keeps its backoff: the next failure waits twice as long', { timeout: 60_000 }, async () => {
    const stuck = await campaignTeam();
    errors.length = 0;
    const holder = await t.database.pool.connect();
    const other = await t.database.pool.connect();
    const d = decider(300);
    const failures = () => errors.filter((e) => e.team_id === stuck.teamId);
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM mail_accounts WHERE id = $1 FOR UPDATE', [stuck.accountId]);
      assert.equal((await stuck.a.post('/email/contacts/upsert', { email: 'stuck2@example.com' })).statusCode, 200);
      d.start();
      await until('the first failure', async () => failures().length === 1, 10_000);
      assert.match(failures()[0]!.msg, /retried in 1000 ms/);
      // Another process's decider holds the team (as a second worker stuck the same way would): the
      // retry after the backoff finds it busy, for a while.
      await other.query('SELECT pg_advisory_lock($1::bigint)', [String(decideLockKey(stuck.teamId))]);
      await sleep(1_500);
      assert.equal(failures().length, 1);
      await other.query('SELECT pg_advisory_unlock_all()');
      await until('the second failure', async () => failures().length === 2, 10_000);
      assert.match(failures()[1]!.msg, /retried in 2000 ms/, 'busy did not reset the failure count');
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
      await other.query('SELECT pg_advisory_unlock_all()').catch(() => {});
      other.release();
      await d.stop();
    }
  });

  test("the loop's timeouts hold for its batch's transaction only", async () => {
    const s = await campaignTeam();
    assert.equal((await s.a.post('/email/contacts/upsert', { email: 'timeouts@example.com' })).statusCode, 200);
    // One connection, so the statement after the batch runs on the batch's session.
    const pool = createPool(t.database.url, 1);
    const db = createDb(pool);
    try {
      const seen: string[] = [];
      const base = decideOptions({ db, config: testConfig() });
      const outcome = await decideBatch(db, s.teamId, () => new Date(), {
        ...base, lockTimeoutMs: 1_234, statementTimeoutMs: 5_678,
        processTaken: async (trx, ids) => {
          const { rows } = await sql<{ l: string; s: string }>`SELECT current_setting('lock_timeout') AS l, current_setting('statement_timeout') AS s`.execute(trx);
          seen.push(rows[0]!.l, rows[0]!.s);
          await base.processTaken(trx, ids);
        },
      });
      assert.equal(outcome, 'decided');
      assert.deepEqual(seen, ['1234ms', '5678ms']);
      const { rows } = await sql<{ l: string; s: string }>`SELECT current_setting('lock_timeout') AS l, current_setting('statement_timeout') AS s`.execute(db);
      assert.deepEqual([rows[0]!.l, rows[0]!.s], ['0', '0'], 'back to the session default after the commit');
    } finally {
      await db.destroy();
    }
  });
});
