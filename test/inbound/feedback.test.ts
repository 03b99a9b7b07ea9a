// applyFeedback against a real database: matching by send-log id, Message-ID
// and the relay's id, limited to the source's team; once per report; soft
// bounces suppress only after N in M days; deliveries; unmatched items counted,
// never thrown. Also the signed addresses and the relay-id extraction.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { applyFeedback, unmatchedFeedback, type Feedback } from '../../src/inbound/feedback.ts';
import { parseInboundAddress, replyAddress, returnPathAddress } from '../../src/inbound/address.ts';
import { providerMessageId } from '../../src/inbound/provider-id.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';
import type { Db } from '../../src/db/pool.ts';

async function message(db: Db, teamId: string, email: string, opts: { contact?: boolean; provider?: string; status?: string } = {}) {
  let contactId: string | null = null;
  if (opts.contact !== false) {
    const c = await db.insertInto('contacts').values({ team_id: teamId, email, created_at: new Date(), updated_at: new Date() } as any)
      .onConflict((oc) => oc.columns(['team_id', 'email']).doUpdateSet({ updated_at: new Date() }))
      .returning('id').executeTakeFirstOrThrow();
    contactId = c.id;
  }
  const row = await db.insertInto('email_send_log').values({
    team_id: teamId, contact_id: contactId, email, status: (opts.status ?? 'sent') as any, source: 'transactional',
    provider_message_id: opts.provider ?? null, queued_at: new Date(), created_at: new Date(), updated_at: new Date(),
  } as any).returning('id').executeTakeFirstOrThrow();
  const messageId = `${row.id}@news.example.com`;
  await db.updateTable('email_send_log').set({ message_id: messageId }).where('id', '=', row.id).execute();
  return { id: row.id, contactId, messageId };
}

describe('applyFeedback', () => {
  let d: TestDatabase;
  before(async () => {
    d = await createTestDatabase();
  });
  after(() => d.drop());

  const row = (id: string) => d.db.selectFrom('email_send_log').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const contact = (id: string) => d.db.selectFrom('contacts').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const events = async (teamId: string) =>
    (await sql<{ name: string; payload: any }>`SELECT name, payload FROM events WHERE team_id = ${teamId} ORDER BY id`.execute(d.db)).rows;
  const suppressions = (teamId: string) => d.db.selectFrom('suppressions').selectAll().where('team_id', '=', teamId).execute();

  test('matches by Message-ID (with or without brackets), once; a forged Message-ID whose id exists does not match', async () => {
    const { teamId } = await makeTeam(d.db);
    const m = await message(d.db, teamId, 'a@example.com');
    const hard: Feedback = { smtp_message_id: `<${m.messageId.toUpperCase()}>`, kind: 'bounce_hard', status_code: '5.1.1', diagnostic: 'smtp; 550 5.1.1 unknown' };
    const r1 = await applyFeedback(d.db, [hard]);
    assert.deepEqual(r1.outcomes, ['applied']);
    const r2 = await applyFeedback(d.db, [hard, { ...hard, smtp_message_id: m.messageId }]);
    assert.deepEqual(r2.outcomes, ['duplicate', 'duplicate']);
    assert.equal((await row(m.id)).status, 'bounced_hard');
    assert.equal((await contact(m.contactId!)).status, 'bounced');
    assert.equal((await contact(m.contactId!)).hard_bounces_count, 1);
    const ev = (await events(teamId)).filter((e) => e.name === 'email.bounced.hard');
    assert.equal(ev.length, 1);
    assert.equal(ev[0]!.payload.bounce_reason, 'unknown');
    // The right id with another domain: not our header.
    const other = await message(d.db, teamId, 'b@example.com');
    const forged = await applyFeedback(d.db, [{ smtp_message_id: `${other.id}@evil.example`, kind: 'complaint' }]);
    assert.deepEqual(forged.outcomes, ['unmatched']);
  });

  test('limited to the team the source names: another team\'s message is not found; unmatched items are counted', async () => {
    const { teamId } = await makeTeam(d.db);
    const { teamId: otherTeam } = await makeTeam(d.db);
    const m = await message(d.db, teamId, 'c@example.com', { provider: 'relay-42' });
    const before = (await unmatchedFeedback.get()).values.reduce((n, v) => n + v.value, 0);
    const r = await applyFeedback(d.db, [
      { team_id: otherTeam, message_id: m.id, kind: 'complaint', source: 'ses' },
      { team_id: otherTeam, provider_message_id: 'relay-42', kind: 'complaint', source: 'ses' },
      { provider_message_id: 'nobody', kind: 'bounce_hard', source: 'ses' },
      { kind: 'bounce_hard' } as Feedback,
      { message_id: 'not-a-uuid', kind: 'reply' },
    ]);
    assert.deepEqual(r.outcomes, ['unmatched', 'unmatched', 'unmatched', 'unmatched', 'unmatched']);
    const afterCount = (await unmatchedFeedback.get()).values.reduce((n, v) => n + v.value, 0);
    assert.equal(afterCount - before, 5);
    assert.equal((await contact(m.contactId!)).status, 'active');
    // The right team, by the relay's id: a complaint.
    const ok = await applyFeedback(d.db, [{ team_id: teamId, provider_message_id: 'relay-42', kind: 'complaint', feedback_type: 'abuse', source: 'ses' }]);
    assert.deepEqual(ok.outcomes, ['applied']);
    assert.equal((await contact(m.contactId!)).status, 'complained');
    assert.equal((await suppressions(teamId)).find((s) => s.email === 'c@example.com')?.reason, 'complained');
    const [e] = (await events(teamId)).filter((x) => x.name === 'email.complained');
    assert.deepEqual(e!.payload, {
      email_send_log_id: m.id, contact_id: m.contactId, email: 'c@example.com', complained_at: e!.payload.complained_at,
      feedback_type: 'abuse', message_id: m.messageId,
    });
  });

  test('soft bounces suppress the address only at the limit within the window', async () => {
    const { teamId } = await makeTeam(d.db);
    const opts = { softBounceLimit: 3, softBounceDays: 7 };
    const ms = [];
    for (let i = 0; i < 4; i++) ms.push(await message(d.db, teamId, 'soft@example.com'));
    // An old one, outside the window, does not count.
    await applyFeedback(d.db, [{ message_id: ms[0]!.id, kind: 'bounce_soft', status_code: '4.2.2' }], opts);
    await d.db.updateTable('message_feedback').set({ occurred_at: new Date(Date.now() - 8 * 86_400_000) }).where('email_send_log_id', '=', ms[0]!.id).execute();
    await applyFeedback(d.db, [{ message_id: ms[1]!.id, kind: 'bounce_soft', status_code: '4.2.2' }], opts);
    await applyFeedback(d.db, [{ message_id: ms[2]!.id, kind: 'bounce_soft', status_code: '4.2.2' }], opts);
    assert.equal((await suppressions(teamId)).length, 0, 'two in the window: not yet');
    assert.equal((await contact(ms[0]!.contactId!)).status, 'active');
    await applyFeedback(d.db, [{ message_id: ms[3]!.id, kind: 'bounce_soft', status_code: '4.2.2' }], opts);
    const [s] = await suppressions(teamId);
    assert.equal(s?.reason, 'soft_bounce');
    assert.equal((await contact(ms[0]!.contactId!)).status, 'bounced');
    assert.equal((await contact(ms[0]!.contactId!)).soft_bounces_count, 4);
    assert.equal((await events(teamId)).filter((e) => e.name === 'email.bounced.soft').length, 4);
  });

  test('a delivery report moves sent → delivered only; a later hard bounce overrides it; a reply is once per reply', async () => {
    const { teamId } = await makeTeam(d.db);
    const m = await message(d.db, teamId, 'd@example.com', { contact: false });
    const queued = await message(d.db, teamId, 'e@example.com', { status: 'queued' });
    await applyFeedback(d.db, [{ message_id: m.id, kind: 'delivered' }, { message_id: queued.id, kind: 'delivered' }]);
    assert.equal((await row(m.id)).status, 'delivered');
    assert.ok((await row(m.id)).delivered_at);
    assert.equal((await row(queued.id)).status, 'queued');
    await applyFeedback(d.db, [{ message_id: m.id, kind: 'bounce_hard', status_code: '5.1.1' }]);
    assert.equal((await row(m.id)).status, 'bounced_hard');
    // No contact: the address is still suppressed for the team.
    assert.equal((await suppressions(teamId)).find((s) => s.email === 'd@example.com')?.reason, 'bounced_hard');
    const reply = (mid: string): Feedback => ({ message_id: m.id, kind: 'reply', reply: { from: 'd@example.com', subject: 'Re', text: 'hi', message_id: mid } });
    const r = await applyFeedback(d.db, [reply('<r1@x>'), reply('<r1@x>'), reply('<r2@x>')]);
    assert.deepEqual(r.outcomes, ['applied', 'duplicate', 'applied']);
    const replied = (await events(teamId)).filter((e) => e.name === 'email.replied');
    assert.deepEqual(replied.map((e) => String(e.payload.message_id)).sort((a, b) => a.localeCompare(b)), ['r1@x', 'r2@x']);
    assert.equal(replied[0]!.payload.in_reply_to, m.messageId);
  });

  test('many items in one call take a fixed number of statements (set-based): 500 bounces', async () => {
    const { teamId } = await makeTeam(d.db);
    const ms = [];
    for (let i = 0; i < 500; i++) ms.push({ team_id: teamId, email: `bulk${i}@example.com` });
    const ids = await d.db.insertInto('email_send_log').values(ms.map((m) => ({ ...m, status: 'sent', source: 'transactional' } as any))).returning('id').execute();
    const t0 = Date.now();
    const r = await applyFeedback(d.db, ids.map((x) => ({ message_id: x.id, kind: 'bounce_hard' as const, status_code: '5.1.1' })));
    assert.equal(r.applied, 500);
    assert.equal((await suppressions(teamId)).length, 500);
    assert.ok(Date.now() - t0 < 20_000);
  });
});

test('signed addresses: made and read back; a changed character, another kind or another secret does not verify', () => {
  const secret = 'x'.repeat(40);
  const id = '0192f6c2-8d1e-7c3a-9b2f-1a2b3c4d5e6f';
  const b = returnPathAddress(secret, 'bounces.example.com', id);
  const r = replyAddress(secret, 'bounces.example.com', id);
  assert.match(b, /^b-0192f6c28d1e7c3a9b2f1a2b3c4d5e6f-[0-9a-f]{16}@bounces\.example\.com$/);
  assert.ok(b.split('@')[0]!.length <= 64, 'a local part fits RFC 5321');
  assert.deepEqual(parseInboundAddress(secret, 'bounces.example.com', undefined, b.toUpperCase()), { type: 'bounce', message_id: id });
  assert.deepEqual(parseInboundAddress(secret, 'bounces.example.com', undefined, r), { type: 'reply', message_id: id });
  assert.equal(parseInboundAddress(secret, 'bounces.example.com', undefined, `r${b.slice(1)}`), null, 'a bounce signature is not a reply signature');
  assert.equal(parseInboundAddress('y'.repeat(40), 'bounces.example.com', undefined, b), null);
  assert.equal(parseInboundAddress(secret, 'bounces.example.com', undefined, b.replace('bounces.example.com', 'other.example.com')), null, 'another domain');
  assert.deepEqual(parseInboundAddress(secret, 'bounces.example.com', 'fbl@bounces.example.com', 'FBL@bounces.example.com'), { type: 'fbl' });
  assert.equal(parseInboundAddress(secret, 'bounces.example.com', undefined, 'fbl@bounces.example.com'), null);
});

test('the relay\'s id from its 250 answer, as Postfix, SendGrid, SES, Exim, Exchange, Gmail and Sendmail word it', () => {
  assert.equal(providerMessageId('250 2.0.0 Ok: queued as 4BQZ2x1x2Zz9sXk'), '4BQZ2x1x2Zz9sXk');
  assert.equal(providerMessageId('250 Ok: queued as 9Zo9aGM8TY6s8vE6Lkw6bg'), '9Zo9aGM8TY6s8vE6Lkw6bg');
  assert.equal(providerMessageId('250 Ok 0100018c2b9e5f6a-1c2d3e4f-5a6b-7c8d-9e0f-1a2b3c4d5e6f-000000'), '0100018c2b9e5f6a-1c2d3e4f-5a6b-7c8d-9e0f-1a2b3c4d5e6f-000000');
  assert.equal(providerMessageId('250 OK id=1rABCd-0001Xy-2Z'), '1rABCd-0001Xy-2Z');
  assert.equal(providerMessageId('250 2.6.0 <abc123@AM0PR01MB.eurprd01.prod.exchangelabs.com> [InternalId=1, Hostname=x] Queued mail for delivery'), 'abc123@AM0PR01MB.eurprd01.prod.exchangelabs.com');
  assert.equal(providerMessageId('250 2.0.0 OK  1699999999 a1-20020a17090a.123 - gsmtp'), 'a1-20020a17090a.123');
  assert.equal(providerMessageId('250 2.0.0 3AB1234567 Message accepted for delivery'), '3AB1234567');
  assert.equal(providerMessageId('250 Accepted'), null);
  assert.equal(providerMessageId(''), null);
});
