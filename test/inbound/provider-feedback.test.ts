// Provider events end to end through the real feedback core: a signed SES
// bounce, a SendGrid spam report and a Mailgun delivery arrive at a team's
// inbound URL and move the message, the contact, the suppression list and the
// webhook events; another team's message is never touched; a retry of the
// same event is applied once.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { sendgridEvents, sendgridKeys, sesBounce, SNS_CERT_URL, snsNotification, snsSigner, type SnsSigner } from './provider-fixtures.ts';
import { mailgunSign } from './provider-fixtures.ts';

describe('provider events through the feedback core', () => {
  let t: TestApp;
  let sns: SnsSigner;
  before(async () => {
    sns = await snsSigner();
    t = await buildTestApp({
      deps: { inboundProviders: { fetchCertificate: async (url) => (url === SNS_CERT_URL ? sns.certPem : Promise.reject(new Error('unknown'))), confirmSubscription: async () => {} } },
    });
  });
  after(() => t.close());

  async function inboundPath(key: string, body: object): Promise<string> {
    const res = await t.app.inject({ method: 'POST', url: '/public/v1/email/provider-webhooks', headers: { 'x-api-key': key }, payload: body });
    assert.equal(res.statusCode, 201, res.body);
    return new URL(res.json().provider_webhook.url).pathname;
  }

  /** A contact and a message of the team that the relay accepted ("sent"), with the relay's id. */
  async function sentMessage(teamId: string, email: string, providerId: string | null) {
    const { rows: [contact] } = await t.database.pool.query('INSERT INTO contacts (team_id, email) VALUES ($1, $2) RETURNING id', [teamId, email]);
    const id = randomUUID();
    await t.database.pool.query(
      `INSERT INTO email_send_log (id, team_id, contact_id, email, message_id, status, provider_message_id, sent_at)
       VALUES ($1, $2, $3, $4, $5, 'sent', $6, now())`,
      [id, teamId, contact.id, email, `${id}@mail.example.com`, providerId],
    );
    return { id, contactId: contact.id as string, messageId: `${id}@mail.example.com` };
  }

  const state = async (logId: string, contactId: string, teamId: string, email: string) => {
    const { rows: [m] } = await t.database.pool.query('SELECT status, last_error FROM email_send_log WHERE id = $1', [logId]);
    const { rows: [c] } = await t.database.pool.query('SELECT status FROM contacts WHERE id = $1', [contactId]);
    const { rows: s } = await t.database.pool.query('SELECT reason FROM suppressions WHERE team_id = $1 AND email = $2', [teamId, email]);
    const { rows: e } = await t.database.pool.query('SELECT name, payload FROM events WHERE team_id = $1 AND contact_id = $2 ORDER BY created_at', [teamId, contactId]);
    return { message: m.status as string, error: m.last_error as string | null, contact: c.status as string, suppressions: s.map((r) => r.reason as string), events: e };
  };

  test('SES bounce by the relay id: message bounced_hard, contact bounced, suppressed, email.bounced.hard; a retry is applied once', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const path = await inboundPath(key, { provider: 'ses' });
    const msg = await sentMessage(teamId, 'gone@example.net', '0100019a-ses-0001');
    // SES puts its own Message-ID on the mail; only its id (from the 250 answer) names ours.
    const notification = sns.sign(snsNotification(sesBounce({ sesId: '0100019a-ses-0001', messageId: 'ses-rewritten@email.amazonses.com', recipient: 'gone@example.net' })));
    const res = await t.app.inject({ method: 'POST', url: path, headers: { 'content-type': 'text/plain; charset=UTF-8' }, payload: JSON.stringify(notification) });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, received: 1, matched: 1, unmatched: 0, ignored: 0 });
    const s = await state(msg.id, msg.contactId, teamId, 'gone@example.net');
    assert.equal(s.message, 'bounced_hard');
    assert.match(String(s.error), /user unknown/);
    assert.equal(s.contact, 'bounced');
    assert.deepEqual(s.suppressions, ['bounced_hard']);
    assert.deepEqual(s.events.map((e) => e.name), ['email.bounced.hard']);

    // SNS delivers at least once: the same notification again changes nothing.
    const again = await t.app.inject({ method: 'POST', url: path, payload: JSON.stringify(notification) });
    assert.equal(again.statusCode, 200);
    assert.equal((await state(msg.id, msg.contactId, teamId, 'gone@example.net')).events.length, 1);
  });

  test("SendGrid spam report by our Message-ID: complained, suppressed, email.complained; another team's message is unmatched and untouched", async () => {
    const a = await makeTeam(t.database.db);
    const b = await makeTeam(t.database.db);
    const sg = sendgridKeys();
    const path = await inboundPath(a.key, { provider: 'sendgrid', signing_key: sg.publicKeyBase64 });
    const mine = await sentMessage(a.teamId, 'angry@example.net', null);
    const theirs = await sentMessage(b.teamId, 'other@example.net', 'sg-of-team-b');
    const events = sendgridEvents({ sgId: 'sg-a-1', messageId: mine.messageId, bounced: 'x@example.net', complained: 'angry@example.net', delivered: 'd@example.net' })
      .filter((e) => e.event === 'spamreport');
    // Team B's message, named by its relay id and by its Message-ID, from team A's URL.
    events.push({ ...events[0]!, email: 'other@example.net', sg_message_id: 'sg-of-team-b.filter0001.1.2.0', 'smtp-id': `<${theirs.messageId}>`, event: 'bounce' });
    const body = JSON.stringify(events);
    const res = await t.app.inject({ method: 'POST', url: path, headers: { 'content-type': 'application/json', ...sg.sign(body) }, payload: body });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, received: 2, matched: 1, unmatched: 1, ignored: 0 });
    const s = await state(mine.id, mine.contactId, a.teamId, 'angry@example.net');
    assert.equal(s.contact, 'complained');
    assert.deepEqual(s.suppressions, ['complained']);
    assert.deepEqual(s.events.map((e) => e.name), ['email.complained']);
    assert.equal(s.events[0].payload.email_send_log_id, mine.id);
    const other = await state(theirs.id, theirs.contactId, b.teamId, 'other@example.net');
    assert.deepEqual([other.message, other.contact, other.suppressions, other.events.length], ['sent', 'active', [], 0]);
  });

  test('Mailgun delivery by Message-ID moves sent to delivered; nothing is suppressed', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const signingKey = 'key-delivery-test';
    const path = await inboundPath(key, { provider: 'mailgun', signing_key: signingKey });
    const msg = await sentMessage(teamId, 'happy@example.net', null);
    const payload = {
      signature: mailgunSign(signingKey),
      'event-data': {
        event: 'delivered',
        timestamp: Date.now() / 1000,
        recipient: 'happy@example.net',
        message: { headers: { 'message-id': msg.messageId } },
        'delivery-status': { code: 250, message: 'OK' },
      },
    };
    const res = await t.app.inject({ method: 'POST', url: path, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(payload) });
    assert.equal(res.statusCode, 200, res.body);
    const s = await state(msg.id, msg.contactId, teamId, 'happy@example.net');
    assert.deepEqual([s.message, s.contact, s.suppressions], ['delivered', 'active', []]);
  });
});
