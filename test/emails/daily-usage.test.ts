// Daily limits counted at claim time without a hot row per message: a send job
// reserves its slots in one statement (src/mail/daily-usage.ts). What must
// hold: the limit is never exceeded, also with concurrent jobs on the same
// messages; the counter ends equal to the claims; a day that ended since the
// reservation makes the claim count itself on the new day.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { claimForSmtp, claimManyForSmtp } from '../../src/mail/daily-usage.ts';
import { closeTransports, sendEmailTask } from '../../src/mail/send.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { drain } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { rowsOf, txSetup, type Tx } from './fixtures.ts';

describe('daily limits: reserved slots', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    t = await buildTestApp();
    sink = await startCaptureSink();
    // Counts every write of a usage row, the counted operation of the first test.
    await sql`
      CREATE TABLE usage_writes (mail_account_id uuid, op text);
      CREATE FUNCTION count_usage_write() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO usage_writes VALUES (NEW.mail_account_id, TG_OP); RETURN NEW; END $$;
      CREATE TRIGGER usage_writes AFTER INSERT OR UPDATE ON mail_account_usage
        FOR EACH ROW EXECUTE FUNCTION count_usage_write();`.execute(t.database.db);
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  const batch = async (s: Tx, prefix: string, n: number): Promise<string[]> => {
    const emails = Array.from({ length: n }, (_, i) => ({ template_id: s.templateId, mail_account_id: s.accountId, to_email: `${prefix}${i}@example.com` }));
    const res = await s.c.post('/email/emails/batch', { emails });
    assert.equal(res.statusCode, 202, res.body);
    return res.json().emails.map((e: { id: string }) => e.id);
  };
  const usage = async (accountId: string) => {
    const { rows } = await sql<{ claimed: number }>`SELECT claimed FROM mail_account_usage WHERE mail_account_id = ${accountId}`.execute(t.database.db);
    return rows.map((r) => r.claimed);
  };
  const atSink = (prefix: string) => sink.messages.filter((m) => m.to.some((to) => to.startsWith(prefix))).length;

  test('a job of 40 messages on a limit of 25 writes the counter once, sends 25 and queues 15 for tomorrow', async () => {
    const s = await txSetup(t, sink.port, {}, { daily_limit: 25 });
    await batch(s, 'r', 40);
    await drain(t);
    const statuses = (await rowsOf(t, s.teamId)).map((r) => r.status);
    assert.equal(statuses.filter((x) => x === 'sent').length, 25);
    assert.equal(statuses.filter((x) => x === 'queued').length, 15);
    assert.equal(atSink('r'), 25);
    assert.deepEqual(await usage(s.accountId), [25]);
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM usage_writes WHERE mail_account_id = ${s.accountId}`.execute(t.database.db);
    // One reservation for the batch; counting each claim wrote the row 25 times.
    assert.ok(rows[0]!.n <= 2, `usage row written ${rows[0]!.n} times for one job`);
  });

  test('three concurrent jobs on the same 30 messages never claim beyond a limit of 10; the counter ends at the claims', async () => {
    const s = await txSetup(t, sink.port, {}, { daily_limit: 10 });
    const ids = await batch(s, 'c', 30);
    await sql`DELETE FROM graphile_worker._private_jobs`.execute(t.database.db); // the jobs below replace the batch's
    const task = sendEmailTask({ db: t.database.db, config: testConfig() });
    // Different orders, so the jobs race for the same rows in different sequences.
    const orders = [ids, [...ids].reverse(), [...ids.slice(15), ...ids.slice(0, 15)]];
    await Promise.allSettled(orders.map((o) => (task as (p: unknown) => Promise<void>)({ email_send_log_ids: o })));
    const statuses = (await rowsOf(t, s.teamId)).map((r) => r.status);
    assert.equal(statuses.filter((x) => x === 'sent').length, 10);
    assert.equal(statuses.filter((x) => x === 'queued').length, 20);
    assert.equal(atSink('c'), 10);
    assert.deepEqual(await usage(s.accountId), [10], 'unused slots are given back, none is lost or double-counted');
  });

  test('a slot of a day that has ended: the claim counts itself on today, under the cap', async () => {
    const s = await txSetup(t, sink.port, {}, { daily_limit: 1 });
    const [a, b] = await batch(s, 'd', 2);
    await sql`DELETE FROM graphile_worker._private_jobs`.execute(t.database.db);
    const row = (id: string) => ({ id, team_id: s.teamId });
    assert.ok(await claimForSmtp(t.database.db, row(a!), s.accountId, 1, '2000-01-01'), 'counted on today: 1 of 1');
    assert.deepEqual(await usage(s.accountId), [1]);
    assert.equal(await claimForSmtp(t.database.db, row(b!), s.accountId, 1, '2000-01-01'), undefined, 'today is full');
    assert.equal(await claimForSmtp(t.database.db, row(b!), s.accountId, 1, null), undefined, 'no slot: counted, full');
    assert.deepEqual(await usage(s.accountId), [1]);
    const statuses = (await rowsOf(t, s.teamId)).map((r) => r.status).sort();
    assert.deepEqual(statuses, ['queued', 'sending']);
  });

  test('a claim batch: counted once for all, granted in order under the cap, each message claimed at most once', async () => {
    const s = await txSetup(t, sink.port, {}, { daily_limit: 3 });
    const ids = await batch(s, 'm', 6);
    await sql`DELETE FROM graphile_worker._private_jobs`.execute(t.database.db);
    await sql`DELETE FROM usage_writes`.execute(t.database.db);
    const today = (await sql<{ d: string }>`SELECT to_char((now() AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD') AS d`.execute(t.database.db)).rows[0]!.d;
    const [a, b, c, d, e, f] = ids as [string, string, string, string, string, string];
    // a holds a slot of today (reserved by its job): claimed without counting.
    // b, c, d, e have none: they count, in this order, under the cap of 3.
    // c is there twice (two jobs on one message): claimed once.
    const got = await claimManyForSmtp(t.database.db, s.accountId, s.teamId, 3, [
      { id: a, slotDay: today }, { id: b, slotDay: null }, { id: c, slotDay: null }, { id: c, slotDay: null },
      { id: d, slotDay: null }, { id: e, slotDay: null },
    ]);
    assert.deepEqual(got.map((x) => x?.attempts ?? null), [1, 1, 1, null, 1, null]);
    assert.deepEqual(await usage(s.accountId), [3], 'b, c and d counted; a held its own slot; e over the cap');
    const { rows: writes } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM usage_writes WHERE mail_account_id = ${s.accountId}`.execute(t.database.db);
    assert.equal(writes[0]!.n, 1, 'one write of the counter row for the whole batch');
    // Nothing left to count: f and e wait; a claimed message is not claimed again.
    const again = await claimManyForSmtp(t.database.db, s.accountId, s.teamId, 3, [{ id: e, slotDay: null }, { id: f, slotDay: null }, { id: b, slotDay: null }]);
    assert.deepEqual(again, [undefined, undefined, undefined]);
    assert.deepEqual(await usage(s.accountId), [3]);
    const statuses = (await rowsOf(t, s.teamId)).map((r) => r.status).sort();
    assert.deepEqual(statuses, ['queued', 'queued', 'sending', 'sending', 'sending', 'sending']);
  });
});
