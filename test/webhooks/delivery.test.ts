import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runOnce } from 'graphile-worker';
import pino from 'pino';
import { emit } from '../../src/events/emit.ts';
import { buildTaskList } from '../../src/tasks.ts';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { startReceiver, type Receiver, type Received, verifyFy, eventually } from './receiver.ts';

// Compressed, increasing schedule; 10% of the shortest is 80 ms. Jitter off:
// these tests measure the schedule itself, and ± 20 % would make neighbouring
// steps overlap (0.8 × 1.2 s < 1.2 × 0.8 s); the jitter's bounds are tested
// on nextAttemptAt with an injected random source (test/lib/jitter.test.ts).
const DELAYS = [0.8, 1.2, 1.6, 2.0, 2.4, 2.8];
const config = testConfig({ allowedPrivateTargets: ['127.0.0.1'], webhookRetryDelays: DELAYS, webhookTimeoutMs: 1_000, retryJitter: 0 });

/** Standard Webhooks verification, as its libraries do it. */
function verifyStandard(r: Received, secret: string): boolean {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const id = r.headers['webhook-id'];
  const timestamp = r.headers['webhook-timestamp'];
  assert.ok(typeof id === 'string' && typeof timestamp === 'string', 'one webhook-id and one webhook-timestamp header');
  const signed = `${id}.${timestamp}.${r.raw.toString('utf8')}`;
  const expected = createHmac('sha256', key).update(signed).digest('base64');
  return String(r.headers['webhook-signature']).split(' ').some((s) => s === `v1,${expected}`);
}

describe('webhook delivery', () => {
  let t: TestApp;
  let dispatcher: WebhookDispatcher;
  const receivers: Receiver[] = [];
  before(async () => {
    t = await buildTestApp({ config });
    dispatcher = new WebhookDispatcher({ db: t.database.db, pool: t.database.pool, config, log: pino({ level: 'silent' }) });
    await dispatcher.start();
  });
  after(async () => {
    await dispatcher.stop();
    await Promise.all(receivers.map((r) => r.close()));
    await t.close();
  });

  const receiver = async (...args: Parameters<typeof startReceiver>) => {
    const r = await startReceiver(...args);
    receivers.push(r);
    return r;
  };
  const api = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1${url}`, headers: { 'x-api-key': key }, payload: payload as object });
  const processEvents = () => runOnce({ pgPool: t.database.pool, taskList: buildTaskList({ db: t.database.db, config }) });
  async function setup(url: string, events = ['email.contact.saved', 'email.contact.unsubscribed']) {
    const team = await makeTeam(t.database.db);
    const res = await api(team.key, 'POST', '/webhooks', { url, events });
    assert.equal(res.statusCode, 201, res.body);
    return { ...team, webhook: res.json().webhook as { id: string; secret: string } };
  }
  async function saveContact(key: string, email: string, extra: object = {}) {
    const res = await api(key, 'POST', '/email/contacts/upsert', { email, ...extra });
    assert.equal(res.statusCode, 200, res.body);
    await processEvents();
  }
  /**
   * What the receiver got once a change (disable, delete) has committed and any
   * attempt claimed before it has arrived: on a loaded machine the first
   * retry (due 0.8 s after the first attempt) can legitimately go out before
   * the change commits, so later assertions count from here, not from 1.
   * Waiting the attempt timeout covers an attempt claimed just before the
   * commit and still on its way.
   */
  const settled = async (r: Receiver) => {
    await sleep(config.webhookTimeoutMs);
    return r.received.length;
  };
  /**
   * Long enough after `settled` for the retries a change that did not stop
   * them would send: if the first retry went out before the change (counted
   * by `settled`), the second is due 1.2 s after it, 2.0 s after the first
   * attempt; the window ends at least 3.7 s after it.
   */
  const NEXT_TWO_RETRIES_MS = (DELAYS[0]! + DELAYS[1]!) * 1000 + 700;
  const deliveries = async (key: string, webhookId: string, query = '') => (await api(key, 'GET', `/webhooks/${webhookId}/deliveries${query}`)).json();
  /** The newest delivery of a webhook, once it has at least `attempts` attempts recorded. */
  const recorded = async (key: string, webhookId: string, attempts = 1) => {
    let d: any;
    await eventually(async () => {
      d = (await deliveries(key, webhookId)).deliveries[0];
      assert.ok(d && d.attempts >= attempts, `delivery has ${d?.attempts} attempts`);
    });
    return d;
  };

  test('an event reaches the subscribed webhook as a compact, signed envelope', async () => {
    const r = await receiver();
    const { key, teamId, webhook } = await setup(r.url);
    const other = await api(key, 'POST', '/webhooks', { url: `${r.url}/sent-only`, events: ['email.sent'] });
    assert.equal(other.statusCode, 201);
    await saveContact(key, 'Ada@Example.com', { first_name: 'Ada', country_code: 'GB' });
    const [got] = await r.waitFor(1);
    assert.equal(got!.method, 'POST');
    assert.equal(got!.path, '/hook');
    assert.equal(got!.headers['content-type'], 'application/json');
    assert.equal(got!.headers['user-agent'], `${config.serviceName}/1.0`);
    assert.equal(got!.headers['x-fy-origin'], 'webhook');
    assert.match(String(got!.headers['x-fy-signature']), /^t=\d{10},v1=[0-9a-f]{64}$/);
    assert.ok(verifyFy(got!, webhook.secret), 'X-FY-Signature verifies over the raw body');
    assert.ok(verifyStandard(got!, webhook.secret), 'Standard Webhooks signature verifies');
    assert.equal(verifyFy(got!, 'whsec_wrong'), false);
    const t0 = Number(String(got!.headers['x-fy-signature']).slice(2, 12));
    assert.ok(Math.abs(t0 - Date.now() / 1000) < 10);
    assert.equal(got!.raw.toString('utf8'), JSON.stringify(JSON.parse(got!.raw.toString('utf8'))), 'compact JSON');
    const env = got!.body;
    assert.deepEqual(Object.keys(env), ['id', 'event', 'team_id', 'timestamp', 'payload']);
    assert.equal(env.event, 'email.contact.saved');
    assert.equal(env.team_id, teamId);
    assert.equal(got!.headers['webhook-id'], env.id);
    assert.match(env.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.deepEqual(Object.keys(env.payload).sort(), [
      'contact_id', 'country_code', 'created_at', 'email', 'first_name', 'foreign_id', 'last_name', 'phone', 'updated_at',
    ]);
    assert.equal(env.payload.email, 'ada@example.com');
    assert.equal(env.payload.first_name, 'Ada');

    await recorded(key, webhook.id);
    await sleep(200);
    assert.equal(r.received.length, 1, 'the email.sent-only webhook got nothing');
    const log = await deliveries(key, webhook.id);
    assert.equal(log.deliveries.length, 1);
    const d = log.deliveries[0];
    assert.equal(d.id, env.id);
    assert.equal(d.status, 'success');
    assert.equal(d.response_code, 200);
    assert.equal(d.response_body, '{"received":true}');
    assert.equal(d.attempts, 1);
    assert.equal(d.attempted_at.length, 1);
    assert.equal(d.attempt_log[0].response_code, 200);
    assert.equal(d.next_attempt_at, null);
    assert.deepEqual(d.payload, env);
    const hook = (await api(key, 'GET', `/webhooks/${webhook.id}`)).json().webhook;
    assert.ok(hook.last_success_at && Date.parse(hook.last_success_at) >= Date.parse(d.attempted_at[0]) - 1);

    const unsub = await api(key, 'POST', '/email/contacts/unsubscribe', { email: 'ada@example.com' });
    assert.ok(unsub.statusCode < 300, unsub.body);
    await processEvents();
    const [, second] = await r.waitFor(2);
    assert.equal(second!.body.event, 'email.contact.unsubscribed');
    assert.equal(second!.body.payload.unsubscribe_method, 'api');
    assert.equal(second!.body.payload.email, 'ada@example.com');
  });

  test('ingested leads and sales reach their webhooks with the 6.3 payloads', async () => {
    const r = await receiver();
    const { key, teamId } = await setup(r.url, ['email.lead.created', 'email.sale.created']);
    for (const body of [
      { event_name: 'lead.created', email: 'lead@example.com', payload: { source: 'landing' } },
      { event_name: 'sale.created', email: 'lead@example.com', payload: { amount: 19.5, currency: 'EUR', source: 'shop' } },
    ]) {
      const res = await api(key, 'POST', '/email/events', body);
      assert.equal(res.statusCode, 202, res.body);
    }
    await processEvents();
    const got = await r.waitFor(2);
    const byEvent = Object.fromEntries(got.map((x) => [x.body.event, x.body]));
    assert.deepEqual(Object.keys(byEvent).sort(), ['email.lead.created', 'email.sale.created']);
    assert.equal(byEvent['email.lead.created'].team_id, teamId);
    assert.deepEqual(Object.keys(byEvent['email.lead.created'].payload).sort(), [
      'campaign_id', 'campaign_send_id', 'contact_id', 'created_at', 'email', 'lead_id', 'source',
    ]);
    const sale = byEvent['email.sale.created'].payload;
    assert.equal(sale.amount, 19.5);
    assert.equal(typeof sale.currency, 'string');
    assert.equal(sale.email, 'lead@example.com');
  });

  test('failed attempts follow the retry schedule and the delivery fails after attempt 7', async () => {
    const r = await receiver((_q, res) => {
      res.writeHead(500);
      res.end('boom');
    });
    const { key, webhook } = await setup(r.url);
    await saveContact(key, 'retry@example.com');
    const got = await r.waitFor(7, 30_000);
    const gaps = got.slice(1).map((x, i) => (x.at - got[i]!.at) / 1000);
    gaps.forEach((gap, i) => {
      const want = DELAYS[i]!;
      // Never early; late by less than the 0.4 s between two steps of the schedule, so
      // an off-by-one schedule still fails while a loaded CI machine (+96 ms once) does not.
      assert.ok(gap >= want * 0.9 && gap <= want + 0.35, `attempt ${i + 2} came ${gap.toFixed(3)} s after the previous one; schedule ${want} s`);
    });
    process.stderr.write(`retry gaps (s): ${gaps.map((g) => g.toFixed(3)).join(', ')}; schedule ${DELAYS.join(', ')}\n`);
    assert.equal(new Set(got.map((x) => x.body.id)).size, 1, 'every retry repeats the envelope id');
    await sleep(4_000);
    assert.equal(r.received.length, 7, 'no eighth attempt');
    const d = (await deliveries(key, webhook.id, '?status=failed')).deliveries[0];
    assert.equal(d.status, 'failed');
    assert.equal(d.attempts, 7);
    assert.equal(d.attempted_at.length, 7);
    assert.equal(d.attempt_log.length, 7);
    for (const a of d.attempt_log as { response_code: number; duration_ms: number }[]) {
      assert.equal(a.response_code, 500);
      assert.ok(Number.isInteger(a.duration_ms) && a.duration_ms < config.webhookTimeoutMs, `duration_ms ${a.duration_ms}`);
    }
    assert.equal(d.response_body, 'boom');
    assert.equal(d.next_attempt_at, null);
    assert.match(d.last_error, /500/);
    assert.equal((await deliveries(key, webhook.id, '?status=pending')).deliveries.length, 0);
  });

  test('duration_ms is the time the receiver took to answer', async () => {
    // A receiver that answers after a known pause, and one that answers at once:
    // the recorded durations must tell them apart by about that pause.
    const PAUSE_MS = 300;
    const slow = await receiver((_q, res) => {
      setTimeout(() => {
        res.writeHead(500);
        res.end('slow');
      }, PAUSE_MS);
    });
    const fast = await receiver((_q, res) => {
      res.writeHead(500);
      res.end('fast');
    });
    const s = await setup(slow.url);
    const f = await setup(fast.url);
    // The best of three deliveries each: on a loaded machine one delivery can wait
    // for a core (a fast receiver once measured 242 ms), the pause cannot shrink.
    const best = async (key: string, webhookId: string, email: string) => {
      let min = Infinity;
      for (let i = 0; i < 3; i++) {
        await saveContact(key, `${i}-${email}`);
        await eventually(async () => {
          const list = (await deliveries(key, webhookId)).deliveries;
          assert.ok(list.length > i && list.every((d: any) => d.attempts >= 1), `${list.length} deliveries`);
        });
      }
      for (const d of (await deliveries(key, webhookId)).deliveries) min = Math.min(min, d.attempt_log[0].duration_ms as number);
      return min;
    };
    const slowMs = await best(s.key, s.webhook.id, 'slow-answer@example.com');
    const fastMs = await best(f.key, f.webhook.id, 'fast-answer@example.com');
    assert.ok(slowMs >= PAUSE_MS - 5 && slowMs < config.webhookTimeoutMs, `slow receiver: ${slowMs} ms`);
    assert.ok(fastMs >= 0 && fastMs < slowMs - PAUSE_MS / 2, `fast receiver: ${fastMs} ms, slow: ${slowMs} ms`);
  });

  test('disable pauses pending deliveries; enable sends them signed with the new secret', async () => {
    let status = 503;
    const r = await receiver((_q, res) => {
      res.writeHead(status);
      res.end();
    });
    const { key, webhook } = await setup(r.url);
    await saveContact(key, 'pause@example.com');
    await r.waitFor(1);
    assert.equal((await api(key, 'POST', `/webhooks/${webhook.id}/disable`)).statusCode, 200);
    const sentBefore = await settled(r);
    status = 200;
    await sleep(NEXT_TWO_RETRIES_MS);
    assert.equal(r.received.length, sentBefore, 'nothing is sent while disabled');
    assert.equal((await deliveries(key, webhook.id)).deliveries[0].status, 'pending');
    const enabled = (await api(key, 'POST', `/webhooks/${webhook.id}/enable`)).json().webhook;
    assert.notEqual(enabled.secret, webhook.secret);
    const started = Date.now();
    const resumed = (await r.waitFor(sentBefore + 1))[sentBefore];
    assert.ok(Date.now() - started < 3_000, 'sent promptly after enabling');
    assert.ok(verifyFy(resumed!, enabled.secret), 'signed with the new secret');
    assert.equal(verifyFy(resumed!, webhook.secret), false, 'not with the old one');
    assert.equal((await recorded(key, webhook.id, sentBefore + 1)).status, 'success');
  });

  test('deleting a webhook cancels its pending deliveries', async () => {
    const r = await receiver((_q, res) => {
      res.writeHead(500);
      res.end();
    });
    const { key, webhook } = await setup(r.url);
    await saveContact(key, 'cancel@example.com');
    await r.waitFor(1);
    assert.equal((await api(key, 'DELETE', `/webhooks/${webhook.id}`)).statusCode, 200);
    const sentBefore = await settled(r);
    await sleep(NEXT_TWO_RETRIES_MS);
    assert.equal(r.received.length, sentBefore, 'nothing is sent once deleted');
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1', [webhook.id]);
    assert.equal(rows[0].n, 0);
  });

  test('410 Gone disables the webhook', async () => {
    const r = await receiver((_q, res) => {
      res.writeHead(410);
      res.end('gone');
    });
    const { key, webhook } = await setup(r.url);
    await saveContact(key, 'gone@example.com');
    await r.waitFor(1);
    await eventually(async () => {
      const hook = (await api(key, 'GET', `/webhooks/${webhook.id}`)).json().webhook;
      assert.equal(hook.is_enabled, false);
    });
    await sleep(DELAYS[0]! * 1000 + 500);
    assert.equal(r.received.length, 1, 'no retries to a receiver that is gone');
  });

  test('a Retry-After longer than the schedule is honoured; a shorter one is not', async () => {
    let n = 0;
    const r = await receiver((_q, res) => {
      n++;
      if (n === 1) res.writeHead(429, { 'retry-after': '2' });
      else if (n === 2) res.writeHead(503, { 'retry-after': '0' });
      else res.writeHead(204);
      res.end();
    });
    const { key } = await setup(r.url);
    await saveContact(key, 'later@example.com');
    const got = await r.waitFor(3, 15_000);
    const first = (got[1]!.at - got[0]!.at) / 1000;
    const second = (got[2]!.at - got[1]!.at) / 1000;
    // Not before Retry-After; late by at most what a loaded machine adds (+216 ms seen in CI).
    assert.ok(first >= 1.8 && first <= 2.35, `Retry-After: 2 honoured (waited ${first} s)`);
    // Not before the schedule (Retry-After: 0 would mean at once); after it, the
    // dispatcher's claim and a loaded machine may add a few hundred ms.
    assert.ok(second >= DELAYS[1]! * 0.9 && second <= DELAYS[1]! + 0.5, `the schedule wins over a shorter Retry-After (waited ${second} s)`);
  });

  test('redirects are not followed and count as failures; slow receivers time out', async () => {
    const target = await receiver();
    const r = await receiver((_q, res) => {
      res.writeHead(302, { location: target.url });
      res.end();
    });
    const { key, webhook } = await setup(r.url);
    await saveContact(key, 'redirect@example.com');
    await r.waitFor(1);
    const d = await recorded(key, webhook.id);
    assert.equal(target.received.length, 0, 'the redirect target was never called');
    assert.equal(d.status, 'pending');
    assert.equal(d.response_code, 302);
    assert.match(d.last_error, /redirect/);

    const slow = await receiver(() => {
      /* never answers */
    });
    const s = await setup(slow.url);
    await saveContact(s.key, 'slow@example.com');
    await slow.waitFor(1);
    const sd = await recorded(s.key, s.webhook.id);
    assert.equal(sd.attempts, 1);
    assert.equal(sd.response_code, null);
    assert.match(sd.last_error, /timeout/);
    assert.ok(sd.attempt_log[0].duration_ms >= config.webhookTimeoutMs * 0.9);
  });

  test('a receiver that drips its answer a byte at a time is cut off at the attempt timeout, not at its end', async () => {
    // Each byte comes well within the agent's per-read body timeout; only the
    // attempt's whole deadline ends it.
    const dripMs = config.webhookTimeoutMs / 5;
    const r = await receiver((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      let n = 0;
      const drip = setInterval(() => {
        if (res.destroyed || ++n > 50) {
          clearInterval(drip);
          res.end();
        } else res.write('x');
      }, dripMs);
    });
    const { key, webhook } = await setup(r.url);
    await saveContact(key, 'drip@example.com');
    await r.waitFor(1);
    const d = await recorded(key, webhook.id);
    assert.equal(d.response_code, null, 'the attempt did not complete');
    assert.match(d.last_error, /timeout/);
    const ms = d.attempt_log[0].duration_ms;
    // The whole answer would take 50 drips (10 timeouts); the cut comes at the timeout.
    assert.ok(ms >= config.webhookTimeoutMs * 0.9 && ms < 2 * config.webhookTimeoutMs, `cut off after ${ms} ms`);
  });

  test('response bodies are kept up to 4 KiB; resend repeats the envelope id with a fresh attempt sequence', async () => {
    const r = await receiver((_q, res) => {
      res.writeHead(200);
      res.end('é'.repeat(5_000));
    });
    const { key, webhook } = await setup(r.url);
    await saveContact(key, 'resend@example.com');
    await r.waitFor(1);
    const d = await recorded(key, webhook.id);
    assert.ok(Buffer.byteLength(d.response_body) <= 4096 && Buffer.byteLength(d.response_body) >= 4094, String(Buffer.byteLength(d.response_body)));
    assert.ok(d.response_body.startsWith('éé'));
    assert.equal(d.simulated, false, 'a delivery of a real event is not simulated');
    const res = await api(key, 'POST', `/webhooks/${webhook.id}/deliveries/${d.id}/resend`);
    assert.equal(res.statusCode, 202, res.body);
    assert.equal(res.json().delivery.status, 'pending');
    // The answer is the queued attempt: the second of this delivery, due now.
    const attempt = res.json().attempt;
    assert.equal(attempt.number, 2);
    assert.equal(attempt.status, 'queued');
    assert.equal(attempt.max_attempts, 7);
    assert.ok(Math.abs(Date.parse(attempt.due_at) - Date.now()) < 5_000, attempt.due_at);
    const [first, again] = await r.waitFor(2);
    assert.equal(again!.body.id, first!.body.id);
    assert.equal(again!.raw.toString(), first!.raw.toString(), 'the same envelope bytes');
    const after2 = await recorded(key, webhook.id, 2);
    assert.equal(after2.attempts, 2);
    assert.equal(after2.status, 'success');
    assert.equal((await api(key, 'POST', `/webhooks/${webhook.id}/deliveries/00000000-0000-7000-8000-000000000000/resend`)).statusCode, 404);
  });

  test('simulate sends one signed sample delivery, logged, with the receiver answer', async () => {
    const r = await receiver((_q, res) => {
      res.writeHead(202);
      res.end('thanks');
    });
    const { key, webhook } = await setup(r.url, ['email.sent']);
    const res = await api(key, 'POST', '/webhooks/simulate', { webhook_id: webhook.id, event: 'email.bounced.hard' });
    assert.equal(res.statusCode, 200, res.body);
    const { delivery } = res.json();
    assert.equal(delivery.response_code, 202);
    assert.equal(delivery.status, 'success');
    assert.equal(delivery.attempts, 1);
    assert.equal(delivery.simulated, true, 'a simulated delivery says so');
    assert.equal(r.received.length, 1);
    assert.ok(verifyFy(r.received[0]!, webhook.secret));
    assert.equal(r.received[0]!.body.event, 'email.bounced.hard');
    assert.equal(r.received[0]!.body.id, delivery.id);
    assert.deepEqual(Object.keys(r.received[0]!.body.payload).sort(), [
      'bounce_category', 'bounce_reason', 'bounced_at', 'contact_id', 'diagnostic', 'email', 'email_send_log_id', 'message_id',
    ]);
    const listed = await deliveries(key, webhook.id, '?event=email.bounced.hard&status=success');
    assert.equal(listed.deliveries.length, 1);
    assert.equal(listed.deliveries[0].simulated, true);
    assert.equal((await deliveries(key, webhook.id, '?event=email.sent')).deliveries.length, 0);
    assert.equal((await api(key, 'GET', `/webhooks/${webhook.id}/deliveries?status=done`)).statusCode, 422);

    r.respond((_q, res2) => {
      res2.writeHead(500);
      res2.end();
    });
    const failed = (await api(key, 'POST', '/webhooks/simulate', { webhook_id: webhook.id, event: 'email.sent' })).json().delivery;
    assert.equal(failed.status, 'failed', 'a simulated delivery has a single attempt');
    await sleep(DELAYS[0]! * 1000 + 500);
    assert.equal(r.received.length, 2);
  });

  test('the address connected to is checked at connect time (DNS rebinding), not only when saved', async () => {
    const r = await receiver();
    const { key, teamId } = await makeTeam(t.database.db);
    // As if the name had resolved to a public address when saved and to 127.0.0.1 now.
    const strict = { ...config, allowedPrivateTargets: [] };
    const guarded = new WebhookDispatcher({ db: t.database.db, pool: t.database.pool, config: strict, log: pino({ level: 'silent' }) });
    await dispatcher.stop();
    await guarded.start();
    try {
      for (const url of [`http://localhost:${r.port}/hook`, `http://127.0.0.1:${r.port}/hook`]) {
        await t.database.pool.query(
          `INSERT INTO webhooks (team_id, url, events, secret_enc) SELECT $1, $2, '{email.contact.saved}', secret_enc FROM webhooks LIMIT 1`,
          [teamId, url],
        );
      }
      await saveContact(key, 'rebind@example.com');
      await eventually(async () => {
        const { rows } = await t.database.pool.query('SELECT last_error FROM webhook_deliveries WHERE team_id = $1', [teamId]);
        assert.equal(rows.length, 2);
        for (const row of rows) assert.match(row.last_error ?? '', /not a public address/);
      });
      assert.equal(r.received.length, 0, 'nothing reached the loopback receiver');
    } finally {
      await guarded.stop();
      dispatcher = new WebhookDispatcher({ db: t.database.db, pool: t.database.pool, config, log: pino({ level: 'silent' }) });
      await dispatcher.start();
    }
  });

  test('a rolled-back change emits nothing; fan-out is idempotent', async () => {
    const r = await receiver();
    const { teamId, key } = await setup(r.url);
    await assert.rejects(
      t.database.db.transaction().execute(async (tx) => {
        await emit(tx, [{ teamId, name: 'contact.saved', payload: { email: 'ghost@example.com' } }]);
        throw new Error('roll back');
      }),
    );
    await processEvents();
    await sleep(300);
    assert.equal(r.received.length, 0);
    await saveContact(key, 'once@example.com');
    const { enqueueDeliveries } = await import('../../src/webhooks/deliveries.ts');
    const { rows: ev } = await t.database.pool.query('SELECT id FROM events WHERE team_id = $1', [teamId]);
    assert.equal(await enqueueDeliveries(t.database.db, ev), 0, 'a second fan-out of the same events adds nothing');
    await r.waitFor(1);
    await sleep(300);
    assert.equal(r.received.length, 1);
  });
});
