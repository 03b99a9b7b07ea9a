// Provider webhooks at the HTTP edge: management API, signature checks (a
// valid and a forged request for each provider, on documented payload
// shapes), SNS subscription confirmation and topic pinning, refusals counted
// in /metrics. The feedback core is replaced by a recorder here, so each test
// sees exactly what would be applied; provider-feedback.test.ts runs the real
// core end to end.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { ProviderFeedback } from '../../src/inbound/providers/events.ts';
import { fetchSnsCertificate, isSnsUrl } from '../../src/inbound/providers/sns.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import {
  mailgunComplained,
  mailgunFailed,
  postmarkBounce,
  postmarkSpamComplaint,
  sendgridEvents,
  sendgridKeys,
  sesBounce,
  sesComplaint,
  SNS_CERT_URL,
  snsNotification,
  snsSigner,
  snsSubscriptionConfirmation,
  TOPIC_ARN,
  type SnsSigner,
} from './provider-fixtures.ts';

const METRICS_TOKEN = 'metrics-token-for-provider-tests';

describe('provider webhooks', () => {
  let t: TestApp;
  let sns: SnsSigner;
  const applied: { teamId: string; items: ProviderFeedback[] }[] = [];
  const certFetches: string[] = [];
  const confirmations: string[] = [];

  before(async () => {
    sns = await snsSigner();
    t = await buildTestApp({
      config: { publicUrl: 'https://plover.example.com', intake: { ...testConfig().intake, metricsToken: METRICS_TOKEN } },
      deps: {
        inboundProviders: {
          fetchCertificate: async (url) => {
            certFetches.push(url);
            if (url !== SNS_CERT_URL) throw new Error('unknown certificate');
            return sns.certPem;
          },
          confirmSubscription: async (url) => void confirmations.push(url),
          apply: async (_db, teamId, items) => {
            applied.push({ teamId, items });
            return { matched: items.filter((i) => i.recipient !== 'nobody@example.net').length, unmatched: items.filter((i) => i.recipient === 'nobody@example.net').length };
          },
        },
      },
    });
  });
  after(() => t.close());

  const api = (key: string, method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/public/v1/email/provider-webhooks${url}`, headers: { 'x-api-key': key }, payload: payload as object });

  async function create(key: string, body: object) {
    const res = await api(key, 'POST', '', body);
    assert.equal(res.statusCode, 201, res.body);
    const hook = res.json().provider_webhook;
    const u = new URL(hook.url);
    return { hook, path: u.pathname, user: decodeURIComponent(u.username), password: decodeURIComponent(u.password) };
  }

  const post = (path: string, payload: string | object, headers: Record<string, string> = {}) =>
    t.app.inject({
      method: 'POST',
      url: path,
      headers: { 'content-type': 'application/json', ...headers },
      payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
    });

  const lastApplied = () => applied.at(-1)!;

  test('create: URL per provider with an unguessable token; signing keys required where needed, validated, never returned', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const sg = sendgridKeys();
    const { hook } = await create(key, { provider: 'sendgrid', signing_key: sg.publicKeyBase64, description: 'main relay' });
    assert.match(hook.url, /^https:\/\/plover\.example\.com\/inbound\/sendgrid\/[A-Za-z0-9_-]{43}$/);
    assert.equal(hook.has_signing_key, true);
    assert.equal(JSON.stringify(hook).includes(sg.publicKeyBase64), false);
    const { rows } = await t.database.pool.query('SELECT token_enc, secret_enc, token_hash FROM provider_webhooks WHERE id = $1 AND team_id = $2', [hook.id, teamId]);
    const token = hook.url.split('/').at(-1);
    assert.equal(rows[0].token_enc.includes(Buffer.from(token)), false, 'the token is not stored in clear');
    assert.equal(rows[0].secret_enc.includes(Buffer.from(sg.publicKeyBase64)), false);

    const pm = await create(key, { provider: 'postmark' });
    assert.equal(pm.user, 'plover');
    assert.match(pm.password, /^[A-Za-z0-9_-]{43}$/);
    const ses = await create(key, { provider: 'ses' });
    assert.equal(ses.hook.has_signing_key, false);
    assert.notEqual(ses.path.split('/').at(-1), pm.path.split('/').at(-1));

    for (const [body, field] of [
      [{ provider: 'sendgrid' }, 'signing_key'],
      [{ provider: 'mailgun' }, 'signing_key'],
      [{ provider: 'sendgrid', signing_key: 'bm90IGEga2V5' }, 'signing_key'],
      [{ provider: 'ses', signing_key: 'x' }, 'signing_key'],
      [{ provider: 'sparkpost' }, 'provider'],
    ] as const) {
      const res = await api(key, 'POST', '', body);
      assert.equal(res.statusCode, 422, JSON.stringify(body));
      assert.equal(res.json().error.details[0].field, field, res.body);
    }

    const list = (await api(key, 'GET', '')).json();
    assert.equal(list.provider_webhooks.length, 3);
    assert.equal(list.meta.total, '3');
    assert.equal((await api(key, 'GET', `/${hook.id}`)).json().provider_webhook.url, hook.url);
  });

  test("another team's provider webhook is 404 to read and delete; a deleted URL answers 404", async () => {
    const a = await makeTeam(t.database.db);
    const b = await makeTeam(t.database.db);
    const { hook, path } = await create(a.key, { provider: 'mailgun', signing_key: 'key-a' });
    assert.equal((await api(b.key, 'GET', `/${hook.id}`)).statusCode, 404);
    assert.equal((await api(b.key, 'DELETE', `/${hook.id}`)).statusCode, 404);
    assert.equal((await api(b.key, 'GET', '')).json().provider_webhooks.length, 0);
    assert.equal((await api(a.key, 'DELETE', `/${hook.id}`)).statusCode, 200);
    const res = await post(path, mailgunFailed({ key: 'key-a', messageId: 'm@x', recipient: 'r@example.net' }));
    assert.equal(res.statusCode, 404);
  });

  test('unknown tokens, a token under another provider, and a malformed token are 404 before the body is read', async () => {
    const { key } = await makeTeam(t.database.db);
    const { path } = await create(key, { provider: 'mailgun', signing_key: 'k' });
    const token = path.split('/').at(-1)!;
    for (const p of [`/inbound/mailgun/${'A'.repeat(43)}`, `/inbound/sendgrid/${token}`, `/inbound/nosuch/${token}`, '/inbound/mailgun/short']) {
      const res = await t.app.inject({ method: 'POST', url: p, headers: { 'content-type': 'application/json', 'content-length': '10000000' }, payload: '' });
      assert.equal(res.statusCode, 404, p);
    }
  });

  test('SES: SubscriptionConfirmation (SignatureVersion 1) is verified, confirmed and pins the topic; a bounce (version 2) is applied; forgeries are 401 and counted', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const { hook, path } = await create(key, { provider: 'ses' });

    const confirmation = sns.sign(snsSubscriptionConfirmation('1'));
    let res = await post(path, confirmation, { 'content-type': 'text/plain; charset=UTF-8', 'x-amz-sns-message-type': 'SubscriptionConfirmation' });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(confirmations.at(-1), confirmation.SubscribeURL);
    assert.equal((await api(key, 'GET', `/${hook.id}`)).json().provider_webhook.sns_topic_arn, TOPIC_ARN);

    const before = applied.length;
    const bounce = sns.sign(snsNotification(sesBounce({ sesId: 'ses-0001', messageId: 'abc@mail.example.com', recipient: 'Gone@Example.net' }), '2'));
    res = await post(path, bounce, { 'content-type': 'text/plain; charset=UTF-8' });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, received: 1, matched: 1, unmatched: 0, ignored: 0 });
    assert.equal(applied.length, before + 1);
    assert.equal(lastApplied().teamId, teamId);
    const [item] = lastApplied().items;
    assert.equal(item!.kind, 'bounce_hard');
    assert.equal(item!.recipient, 'gone@example.net');
    assert.equal(item!.provider_message_id, 'ses-0001');
    assert.equal(item!.message_id, 'abc@mail.example.com');
    assert.equal(item!.status, '5.1.1');
    assert.equal(item!.source, 'ses');

    const complaint = sns.sign(snsNotification(sesComplaint({ sesId: 'ses-0002', messageId: 'c@x', recipient: 'c@example.net' }), '1'));
    res = await post(path, complaint);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(lastApplied().items[0]!.kind, 'complaint');
    assert.equal(lastApplied().items[0]!.feedback_type, 'abuse');

    const soft = sns.sign(snsNotification(sesBounce({ sesId: 'ses-0003', messageId: 'd@x', recipient: 'full@example.net', permanent: false })));
    assert.equal((await post(path, soft)).statusCode, 200);
    assert.equal(lastApplied().items[0]!.kind, 'bounce_soft');

    // Forged: the message changed after signing; signed with another key; a certificate from elsewhere; another topic.
    const count = applied.length;
    const tampered = { ...bounce, Message: bounce.Message.replace('Gone@Example.net', 'victim@example.net') };
    assert.equal((await post(path, tampered)).statusCode, 401);
    const otherSigner = await snsSigner();
    assert.equal((await post(path, otherSigner.sign(snsNotification(sesBounce({ sesId: 'x', messageId: 'y@x', recipient: 'v@example.net' }))))).statusCode, 401);
    const fetchesBefore = certFetches.length;
    const elsewhere = otherSigner.sign({ ...snsNotification(sesBounce({ sesId: 'x', messageId: 'y@x', recipient: 'v@example.net' })), SigningCertURL: 'https://attacker.example.com/cert.pem' });
    assert.equal((await post(path, elsewhere)).statusCode, 401);
    assert.equal(certFetches.length, fetchesBefore, 'a certificate is never fetched from a host that is not SNS');
    const otherTopic = sns.sign(snsNotification(sesBounce({ sesId: 'x', messageId: 'y@x', recipient: 'v@example.net' }), '2', 'arn:aws:sns:us-east-1:999999999999:other'));
    assert.equal((await post(path, otherTopic)).statusCode, 401);
    assert.equal(applied.length, count, 'nothing forged was applied');
    assert.equal(certFetches.filter((u) => u === SNS_CERT_URL).length, 1, 'the certificate is fetched once and cached');

    const metrics = await t.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
    assert.match(metrics.body, /plover_provider_webhook_refused_total\{provider="ses",reason="signature"\} [2-9]/);
    assert.match(metrics.body, /plover_provider_webhook_refused_total\{provider="ses",reason="certificate_url"\} [1-9]/);
    assert.match(metrics.body, /plover_provider_webhook_refused_total\{provider="ses",reason="topic"\} [1-9]/);

    // Not JSON, not an SNS message: 422, nothing applied.
    assert.equal((await post(path, '{not json')).statusCode, 422);
    assert.equal((await post(path, { Type: 'Notification' })).statusCode, 422);
    assert.equal(applied.length, count);
  });

  test('SNS URLs: only https on sns.<region>.amazonaws.com; the production fetcher refuses any other URL without a request', async () => {
    assert.equal(isSnsUrl('https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem'), true);
    assert.equal(isSnsUrl('https://sns.cn-north-1.amazonaws.com.cn/x.pem'), true);
    for (const u of [
      'http://sns.us-east-1.amazonaws.com/x.pem',
      'https://sns.us-east-1.amazonaws.com.attacker.com/x.pem',
      'https://attacker.com/sns.us-east-1.amazonaws.com/x.pem',
      'https://user@sns.us-east-1.amazonaws.com/x.pem',
      'https://sns.us-east-1.amazonaws.com:8443/x.pem',
      'https://s3.amazonaws.com/x.pem',
      'not a url',
    ]) {
      assert.equal(isSnsUrl(u), false, u);
    }
    await assert.rejects(fetchSnsCertificate('https://127.0.0.1/cert.pem'), /not an SNS certificate URL/);
  });

  test('SendGrid: a signed batch applies bounce, spamreport and delivered (others ignored); a forged, unsigned or stale batch is 401', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const sg = sendgridKeys();
    const { path } = await create(key, { provider: 'sendgrid', signing_key: sg.publicKeyBase64 });
    const body = JSON.stringify(sendgridEvents({ sgId: '14c5d75ce93.dfd.64b469', messageId: 'sg1@mail.example.com', bounced: 'b@example.net', complained: 'c@example.net', delivered: 'd@example.net' }));
    let res = await post(path, body, sg.sign(body));
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, received: 3, matched: 3, unmatched: 0, ignored: 3 });
    const { items } = lastApplied();
    assert.equal(lastApplied().teamId, teamId);
    assert.deepEqual(items.map((i) => [i.kind, i.recipient]), [['delivered', 'd@example.net'], ['bounce_hard', 'b@example.net'], ['complaint', 'c@example.net']]);
    assert.equal(items[1]!.provider_message_id, '14c5d75ce93.dfd.64b469');
    assert.equal(items[1]!.message_id, 'sg1@mail.example.com');
    assert.equal(items[1]!.status, '5.0.0');

    const count = applied.length;
    const forged = body.replace('b@example.net', 'x@example.net');
    assert.equal((await post(path, forged, sg.sign(body))).statusCode, 401);
    assert.equal((await post(path, body, sendgridKeys().sign(body))).statusCode, 401, 'signed with another key');
    res = await post(path, body);
    assert.equal(res.statusCode, 401, 'unsigned');
    const stale = String(Math.floor(Date.now() / 1000) - 3 * 86_400);
    assert.equal((await post(path, body, sg.sign(body, stale))).statusCode, 401, 'replayed days later');
    assert.equal(applied.length, count);
  });

  test('SendGrid: a signed batch larger than the pool threshold (parsed in the pool) still verifies: its bytes are not moved away before the check', async () => {
    const { key } = await makeTeam(t.database.db);
    const sg = sendgridKeys();
    const { path } = await create(key, { provider: 'sendgrid', signing_key: sg.publicKeyBase64 });
    const events = sendgridEvents({ sgId: '14c5d75ce93.dfd.64b470', messageId: 'sg2@mail.example.com', bounced: 'b2@example.net', complained: 'c2@example.net', delivered: 'd2@example.net' });
    const padding = Array.from({ length: 600 }, (_, i) => ({ ...events[0], sg_event_id: `pad-${i}-${'x'.repeat(40)}` }));
    const body = JSON.stringify([...events, ...padding]);
    assert.ok(Buffer.byteLength(body) > testConfig().intake.jsonPoolThresholdBytes, `${Buffer.byteLength(body)} bytes`);
    const res = await post(path, body, sg.sign(body));
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, received: 3, matched: 3, unmatched: 0, ignored: 603 });
  });

  test('Postmark: the URL\'s basic credentials are required (401 without or with wrong ones); bounce and spam complaint records map', async () => {
    const { key } = await makeTeam(t.database.db);
    const { path, user, password } = await create(key, { provider: 'postmark' });
    const auth = (u: string, p: string) => ({ authorization: `Basic ${Buffer.from(`${u}:${p}`).toString('base64')}` });
    let res = await post(path, postmarkBounce({ postmarkId: 'pm-1', recipient: 'h@example.net' }), auth(user, password));
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(lastApplied().items[0]!.kind, 'bounce_hard');
    assert.equal(lastApplied().items[0]!.provider_message_id, 'pm-1');
    assert.equal(lastApplied().items[0]!.status, '5.1.1');
    res = await post(path, postmarkBounce({ postmarkId: 'pm-2', recipient: 's@example.net', type: 'SoftBounce' }), auth(user, password));
    assert.equal(lastApplied().items[0]!.kind, 'bounce_soft');
    res = await post(path, postmarkSpamComplaint({ postmarkId: 'pm-3', recipient: 'c@example.net' }), auth(user, password));
    assert.equal(lastApplied().items[0]!.kind, 'complaint');
    res = await post(path, { ...postmarkBounce({ postmarkId: 'pm-4', recipient: 'a@example.net' }), Type: 'AutoResponder' }, auth(user, password));
    assert.deepEqual(res.json(), { ok: true, received: 0, matched: 0, unmatched: 0, ignored: 1 });

    const count = applied.length;
    res = await post(path, postmarkBounce({ postmarkId: 'pm-5', recipient: 'x@example.net' }));
    assert.equal(res.statusCode, 401);
    assert.match(String(res.headers['www-authenticate']), /^Basic/);
    assert.equal((await post(path, postmarkBounce({ postmarkId: 'pm-5', recipient: 'x@example.net' }), auth(user, `${password}x`))).statusCode, 401);
    assert.equal((await post(path, postmarkBounce({ postmarkId: 'pm-5', recipient: 'x@example.net' }), auth('admin', password))).statusCode, 401);
    assert.equal(applied.length, count);
  });

  test('Mailgun: HMAC of timestamp + token with the signing key; failed (permanent, temporary) and complained map; forged or stale is 401', async () => {
    const { key } = await makeTeam(t.database.db);
    const signingKey = 'key-3ax6xnjp29jd6fds4gc373sgvjxteol0';
    const { path } = await create(key, { provider: 'mailgun', signing_key: signingKey });
    let res = await post(path, mailgunFailed({ key: signingKey, messageId: '20261124.1@mail.example.com', recipient: 'Alice@Example.net' }));
    assert.equal(res.statusCode, 200, res.body);
    const [hard] = lastApplied().items;
    assert.equal(hard!.kind, 'bounce_hard');
    assert.equal(hard!.recipient, 'alice@example.net');
    assert.equal(hard!.message_id, '20261124.1@mail.example.com');
    assert.equal(hard!.status, '5.1.1');
    await post(path, mailgunFailed({ key: signingKey, messageId: 'm2@x', recipient: 'b@example.net', severity: 'temporary' }));
    assert.equal(lastApplied().items[0]!.kind, 'bounce_soft');
    await post(path, mailgunComplained({ key: signingKey, messageId: 'm3@x', recipient: 'c@example.net' }));
    assert.equal(lastApplied().items[0]!.kind, 'complaint');
    res = await post(path, mailgunFailed({ key: signingKey, messageId: 'm4@x', recipient: 'nobody@example.net' }));
    assert.deepEqual(res.json(), { ok: true, received: 1, matched: 0, unmatched: 1, ignored: 0 }, 'unmatched is still 200: never a retry loop');

    const count = applied.length;
    const forged = mailgunFailed({ key: 'another-key', messageId: 'm5@x', recipient: 'v@example.net' });
    assert.equal((await post(path, forged)).statusCode, 401);
    const tampered = mailgunFailed({ key: signingKey, messageId: 'm6@x', recipient: 'v@example.net' });
    tampered.signature.token = tampered.signature.token.replace(/^./, (c) => (c === 'a' ? 'b' : 'a'));
    assert.equal((await post(path, tampered)).statusCode, 401);
    const stale = mailgunFailed({ key: signingKey, messageId: 'm7@x', recipient: 'v@example.net' });
    stale.signature = (await import('./provider-fixtures.ts')).mailgunSign(signingKey, String(Math.floor(Date.now() / 1000) - 3 * 86_400));
    assert.equal((await post(path, stale)).statusCode, 401);
    assert.equal((await post(path, { 'event-data': { event: 'failed' } })).statusCode, 401, 'no signature at all');
    assert.equal(applied.length, count);

    const { rows } = await t.database.pool.query("SELECT events_received, events_unmatched FROM provider_webhooks WHERE provider = 'mailgun' AND token_hash = sha256($1::bytea)", [Buffer.from(path.split('/').at(-1)!)]);
    assert.deepEqual(rows[0], { events_received: 4, events_unmatched: 1 });
  });

  test('the body limit holds, and the URLs are not in openapi.json', async () => {
    const { key } = await makeTeam(t.database.db);
    const signingKey = 'k';
    const { path } = await create(key, { provider: 'mailgun', signing_key: signingKey });
    const big = JSON.stringify({ pad: 'x'.repeat(t.app.deps.config.inboundProviders.webhookBodyLimitBytes) });
    assert.equal((await post(path, big)).statusCode, 413);
    const spec = (await t.app.inject({ method: 'GET', url: '/public/v1/openapi.json' })).json();
    assert.equal(Object.keys(spec.paths).some((p) => p.startsWith('/inbound')), false);
    assert.ok(spec.paths['/public/v1/email/provider-webhooks']);
  });
});
