// kill -9 of the worker process while it drains a paused backlog: 2,000 events
// collected while the webhook was disabled, enabled, worker killed twice
// mid-drain and restarted. Every delivery still arrives (at least once, same
// envelope id, signed with the secret issued by the enable) and ends as success.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { startReceiver, type Receiver, verifyFy } from './receiver.ts';

const root = join(import.meta.dirname, '..', '..');
const EVENTS = 2_000;

describe('worker crashes while a paused backlog drains', () => {
  let t: TestApp;
  let r: Receiver;
  let worker: ChildProcess | undefined;
  before(async () => {
    t = await buildTestApp({ config: { allowedPrivateTargets: ['127.0.0.1'] } });
    r = await startReceiver((_q, res) => {
      setTimeout(() => {
        res.writeHead(200);
        res.end();
      }, 10);
    });
  });
  after(async () => {
    worker?.kill('SIGKILL');
    await r.close();
    await t.close();
  });

  const startWorkerProcess = (): ChildProcess =>
    spawn(process.execPath, ['src/worker.ts'], {
      cwd: root,
      env: {
        ...process.env,
        DATABASE_URL: t.database.url,
        WEBHOOK_ALLOWED_TARGETS: '127.0.0.1',
        WEBHOOK_TIMEOUT_MS: '1000',
        WEBHOOK_CONCURRENCY: '20',
        WEBHOOK_RETRY_DELAYS: '0.2,0.2,0.2,0.2,0.2,0.2',
        WORKER_DEAD_AFTER_S: '3',
        LOG_LEVEL: 'silent',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });

  async function killAt(received: number): Promise<void> {
    await r.waitFor(received, 60_000);
    worker!.kill('SIGKILL');
    await new Promise((res) => worker!.once('exit', res));
    worker = startWorkerProcess();
  }

  const count = async (teamId: string) =>
    (
      await t.database.pool.query(
        `SELECT count(*)::int AS total, count(*) FILTER (WHERE status = 'success')::int AS done,
                count(*) FILTER (WHERE status = 'pending' AND next_attempt_at IS NULL)::int AS parked
           FROM webhook_deliveries WHERE team_id = $1`,
        [teamId],
      )
    ).rows[0] as { total: number; done: number; parked: number };

  test(`${EVENTS} events collected while disabled, worker killed twice mid-drain: nothing lost`, { timeout: 180_000 }, async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const api = (method: 'POST' | 'GET', url: string, payload?: object) =>
      t.app.inject({ method, url: `/public/v1${url}`, headers: { 'x-api-key': key }, ...(payload ? { payload } : {}) });
    const hook = await api('POST', '/webhooks', { url: r.url, events: ['email.contact.saved'], is_enabled: false });
    assert.equal(hook.statusCode, 201);
    const { id, secret: oldSecret } = hook.json().webhook as { id: string; secret: string };
    worker = startWorkerProcess();
    for (let b = 0; b < EVENTS / 1000; b++) {
      const contacts = Array.from({ length: 1000 }, (_, i) => ({ email: `p${b * 1000 + i}@pause-crash.example.com` }));
      assert.equal((await api('POST', '/email/contacts/bulk-upsert', { contacts })).statusCode, 200);
    }
    // The running worker fans the events out: all parked, none sent.
    const deadline = Date.now() + 60_000;
    while ((await count(teamId)).parked < EVENTS && Date.now() < deadline) await sleep(100);
    assert.equal((await count(teamId)).parked, EVENTS, 'every event parked for the disabled webhook');
    await sleep(500);
    assert.equal(r.received.length, 0, 'nothing sent while disabled');

    const enabled = await api('POST', `/webhooks/${id}/enable`);
    assert.equal(enabled.statusCode, 200);
    const secret = enabled.json().webhook.secret as string;
    assert.notEqual(secret, oldSecret);
    await killAt(300);
    await killAt(1_200);

    const until = Date.now() + 120_000;
    let c = await count(teamId);
    while (c.done < EVENTS && Date.now() < until) {
      await sleep(250);
      c = await count(teamId);
    }
    assert.equal(c.done, EVENTS, 'every delivery succeeded');
    assert.equal(c.total, EVENTS);
    const { rows } = await t.database.pool.query('SELECT id FROM webhook_deliveries WHERE team_id = $1', [teamId]);
    const receivedIds = new Set(r.received.map((x) => x.body.id));
    const missing = rows.filter((row) => !receivedIds.has(row.id));
    assert.equal(missing.length, 0, `${missing.length} deliveries never reached the receiver`);
    assert.ok(r.received.every((x) => verifyFy(x, secret)), 'every delivery signed with the secret issued by the enable');
    const duplicates = r.received.length - receivedIds.size;
    // Only what a kill interrupts may repeat: attempts in flight (20) and finished ones not yet recorded (a flush holds at most 200).
    assert.ok(duplicates <= 2 * (20 + 200), `${duplicates} repeated deliveries`);
    process.stderr.write(`pause crash test: ${r.received.length} requests for ${EVENTS} deliveries (${duplicates} repeats after 2 kills)\n`);
  });
});
