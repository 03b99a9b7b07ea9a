// contacts.status mirrors the suppression list for contacts written after their
// address was listed: a hard bounce makes `bounced`, a complaint `complained`,
// an unsubscribe `unsubscribed`; manual and soft-bounce entries and an erased
// address's hash leave the contact active. Single and bulk upserts, the CSV
// import, PATCH and event ingestion all do it, in the statement that writes
// the contact.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { emailHmac, suppress, type SuppressionReason } from '../../src/contacts/suppressions.ts';
import { importContacts, RejectsSink } from '../../src/contacts/csv-import.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { api } from '../engine/fixtures.ts';

const config = testConfig();

describe('contacts written after a suppression take its status', () => {
  let t: TestApp;
  let dir: string;
  before(async () => {
    t = await buildTestApp({ config });
    dir = mkdtempSync(join(tmpdir(), 'plover-mirror-'));
  });
  after(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const listed: [string, SuppressionReason][] = [
    ['hard@example.com', 'bounced_hard'],
    ['fbl@example.com', 'complained'],
    ['gone@example.com', 'unsubscribed'],
    ['manual@example.com', 'manual'],
    ['soft@example.com', 'soft_bounce'],
  ];
  const expected: Record<string, string> = {
    'hard@example.com': 'bounced', 'fbl@example.com': 'complained', 'gone@example.com': 'unsubscribed',
    'manual@example.com': 'active', 'soft@example.com': 'active', 'erased@example.com': 'active', 'fresh@example.com': 'active',
  };
  async function listAll(teamId: string) {
    await suppress(t.database.db, listed.map(([email, reason]) => ({ team_id: teamId, email, reason })));
    await t.database.pool.query(`INSERT INTO suppressions (team_id, email_hmac, reason, reasons) VALUES ($1, $2, 'erased', '{erased}')`, [
      teamId, emailHmac(config.appSecret!, 'erased@example.com'),
    ]);
  }
  const statuses = async (teamId: string) => {
    const { rows } = await t.database.pool.query<{ email: string; status: string; unsubscribed_at: Date | null }>(
      'SELECT email, status, unsubscribed_at FROM contacts WHERE team_id = $1', [teamId]);
    return Object.fromEntries(rows.map((r) => [r.email, r.status]));
  };

  test('bulk upsert: one statement mirrors every listed address; unsubscribed_at is set for an unsubscribe', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listAll(teamId);
    const res = await api(t, key).post('/email/contacts/bulk-upsert', { contacts: Object.keys(expected).map((email) => ({ email: email.toUpperCase() })) });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(await statuses(teamId), expected);
    const { rows } = await t.database.pool.query('SELECT unsubscribed_at FROM contacts WHERE team_id = $1 AND email = $2', [teamId, 'gone@example.com']);
    assert.ok(rows[0].unsubscribed_at instanceof Date);
    // Another team's list does not touch this team's contacts.
    const other = await makeTeam(t.database.db);
    await api(t, other.key).post('/email/contacts/bulk-upsert', { contacts: [{ email: 'hard@example.com' }] });
    assert.equal((await statuses(other.teamId))['hard@example.com'], 'active');
  });

  test('single upsert, and its GET', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listAll(teamId);
    const a = api(t, key);
    for (const email of Object.keys(expected)) {
      const res = await a.post('/email/contacts/upsert', { email, first_name: 'X' });
      assert.ok(res.statusCode < 300, res.body);
    }
    assert.deepEqual(await statuses(teamId), expected);
    const got = await a.get(`/email/contacts/by-email?email=${encodeURIComponent('fbl@example.com')}`);
    assert.equal(got.json().contact.status, 'complained');
  });

  test('CSV import', async () => {
    const { teamId } = await makeTeam(t.database.db);
    await listAll(teamId);
    const csv = ['email,first_name', ...Object.keys(expected).map((e) => `${e},Y`)].join('\n');
    const summary = await importContacts({
      db: t.database.db, teamId, input: Readable.from([Buffer.from(csv)]), maxTags: 100, rejects: new RejectsSink(join(dir, `${teamId}.csv`)),
    });
    assert.equal(summary.created, Object.keys(expected).length);
    assert.deepEqual(await statuses(teamId), expected);
  });

  test('PATCH and upsert of a contact that was active before its address was listed without touching it', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    const id = (await a.post('/email/contacts/upsert', { email: 'hard@example.com' })).json().contact_id as string | undefined;
    await a.post('/email/contacts/upsert', { email: 'gone@example.com' });
    // The list written directly (as a path that does not mirror would leave it).
    await suppress(t.database.db, [{ team_id: teamId, email: 'hard@example.com', reason: 'bounced_hard' }, { team_id: teamId, email: 'gone@example.com', reason: 'unsubscribed' }]);
    assert.equal((await statuses(teamId))['hard@example.com'], 'active');
    const contactId = id ?? (await t.database.pool.query('SELECT id FROM contacts WHERE team_id = $1 AND email = $2', [teamId, 'hard@example.com'])).rows[0].id;
    const res = await t.app.inject({ method: 'PATCH', url: `/public/v1/email/contacts/${contactId}`, headers: { 'x-api-key': key }, payload: { first_name: 'Z' } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().contact.status, 'bounced');
    await a.post('/email/contacts/bulk-upsert', { contacts: [{ email: 'gone@example.com', first_name: 'W' }] });
    assert.equal((await statuses(teamId))['gone@example.com'], 'unsubscribed');
  });

  test('an event for a listed address creates its contact with the status', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    await listAll(teamId);
    const res = await api(t, key).post('/email/events', { event_name: 'lead.created', email: 'fbl@example.com' });
    assert.equal(res.statusCode, 202, res.body);
    assert.equal((await statuses(teamId))['fbl@example.com'], 'complained');
  });
});
