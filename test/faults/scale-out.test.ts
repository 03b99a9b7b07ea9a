// Scaled out as docs/operations.md describes: two API processes and two worker
// processes on one PostgreSQL database, with REDIS_URL set. Promised: the rate
// limit is one limit across the API processes (Redis), and each webhook attempt
// is made by exactly one worker (no envelope sent twice when nothing was
// killed; the attempts recorded are the requests the receiver got).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';
import { startApi, startWorkerProcess, type PloverProcess } from './processes.ts';

const LIMIT = 25;
const EVENTS = 2_000;

describe('two API processes and two worker processes', { skip: !process.env.REDIS_URL && 'REDIS_URL is not set' }, () => {
  let database: TestDatabase;
  let receiver: Receiver;
  const procs: PloverProcess[] = [];
  let apis: PloverProcess[] = [];
  // Per envelope id: the first request is refused (500) for about half of them,
  // so retries are part of what must not be doubled.
  const seen = new Map<string, number>();

  before(async () => {
    database = await createTestDatabase();
    receiver = await startReceiver((req, res) => {
      const id = String(req.body.id);
      const n = (seen.get(id) ?? 0) + 1;
      seen.set(id, n);
      const refuse = n === 1 && parseInt(id.at(-1)!, 16) % 2 === 0;
      res.writeHead(refuse ? 500 : 200);
      res.end();
    });
    const env = {
      DATABASE_URL: database.url,
      RATE_LIMIT_PER_MINUTE: String(LIMIT),
      ALLOWED_PRIVATE_TARGETS: '127.0.0.1',
      WEBHOOK_RETRY_DELAYS: '0.2,0.2,0.2,0.2,0.2,0.2',
      WEBHOOK_CONCURRENCY: '20',
      WORKER_DEAD_AFTER_S: '3',
    };
    apis = await Promise.all([startApi(env), startApi(env)]);
    procs.push(...apis);
    const heartbeats = async (n: number) =>
      (await database.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM worker_processes')).rows[0].n >= n;
    procs.push(await startWorkerProcess(env, () => heartbeats(1)));
    procs.push(await startWorkerProcess(env, () => heartbeats(2)));
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await receiver?.close();
    await database?.drop();
  });

  test('the rate limit is shared: over both APIs, exactly the limit is accepted', async () => {
    const { key } = await makeTeam(database.db);
    // One request at a time, alternating between the APIs: with one shared
    // counter the first LIMIT are accepted (half on each) and every later one
    // is refused on both; with a counter per process each would accept LIMIT.
    // (Concurrent requests let the less loaded process take every slot, which
    // says nothing about sharing and failed a loaded CI run.)
    const answers: number[] = [];
    for (let i = 0; i < 2 * LIMIT; i++) {
      answers.push((await fetch(`${apis[i % 2]!.origin}/public/v1/ping`, { headers: { 'x-api-key': key } })).status);
    }
    const accepted = answers.filter((s) => s === 200).length;
    assert.equal(accepted, LIMIT, `accepted ${accepted} of ${2 * LIMIT} with a limit of ${LIMIT} per minute`);
    assert.deepEqual(answers.slice(0, LIMIT).filter((s) => s !== 200), [], 'the first LIMIT are accepted');
    assert.deepEqual(answers.slice(LIMIT).filter((s) => s !== 429), [], 'every later one is refused, on both APIs');
    const perApi = [0, 1].map((p) => answers.filter((s, i) => i % 2 === p && s === 200).length);
    assert.deepEqual(perApi, [Math.ceil(LIMIT / 2), Math.floor(LIMIT / 2)]);
  });

  test(`${EVENTS} deliveries through two workers: each attempt made once`, { timeout: 90_000 }, async () => {
    const { key, teamId } = await makeTeam(database.db);
    const hook = await fetch(`${apis[0]!.origin}/public/v1/webhooks`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ url: receiver.url, events: ['email.contact.saved'] }),
    });
    assert.equal(hook.status, 201);
    // Bulk upserts through both APIs (5 requests with this key, within the limit).
    for (let b = 0; b < EVENTS / 500; b++) {
      const contacts = Array.from({ length: 500 }, (_, i) => ({ email: `s${b * 500 + i}@scale.example.com` }));
      const res = await fetch(`${apis[b % 2]!.origin}/public/v1/email/contacts/bulk-upsert`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ contacts }),
      });
      assert.equal(res.status, 200, await res.text());
    }
    const deadline = Date.now() + 60_000;
    let done = 0;
    while (Date.now() < deadline) {
      const { rows } = await database.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM webhook_deliveries WHERE team_id = $1 AND status = 'success'`, [teamId]);
      done = rows[0].n;
      if (done === EVENTS) break;
      await sleep(200);
    }
    assert.equal(done, EVENTS, 'every delivery succeeded');
    await sleep(500); // a doubled attempt would still be arriving

    const { rows } = await database.pool.query<{ id: string; attempts: number }>(
      'SELECT id, attempts FROM webhook_deliveries WHERE team_id = $1', [teamId]);
    const requests = receiver.received.filter((r) => r.body.team_id === teamId);
    const perId = new Map<string, number>();
    for (const r of requests) perId.set(r.body.id, (perId.get(r.body.id) ?? 0) + 1);
    let retried = 0;
    for (const d of rows) {
      const expected = parseInt(d.id.at(-1)!, 16) % 2 === 0 ? 2 : 1;
      retried += expected - 1;
      assert.equal(perId.get(d.id), expected, `delivery ${d.id}: ${perId.get(d.id)} requests, expected ${expected}`);
      assert.equal(d.attempts, expected, `delivery ${d.id}: ${d.attempts} attempts recorded`);
    }
    const attempts = rows.reduce((s, d) => s + d.attempts, 0);
    assert.equal(requests.length, attempts, 'attempts recorded = requests received');
    process.stderr.write(`scale-out: ${EVENTS} deliveries, ${retried} retried once, ${requests.length} requests, no attempt doubled\n`);
  });
});
