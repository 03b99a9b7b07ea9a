// Address verification against a DNS server on 127.0.0.1 (stub-dns.ts): every
// status from real DNS answers (MX, A-only fallback, null MX, NXDOMAIN, no
// records, SERVFAIL, a timeout), disposable and role addresses, syntax; the
// per-domain cache (one lookup per domain per batch, TTLs); the budget under
// two concurrent callers; the worst batch (5,000 domains, a slow server) in
// bounded time; and a broadcast with verification on: skips with their
// reasons, the budget's skips, results stored on the contacts.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { checkDomain, mailDnsResolver, syntaxProblem, verdictFor } from '../../src/verification/check.ts';
import { prefetchDomains, VERIFY_CONCURRENCY, verifyForSend } from '../../src/verification/send.ts';
import { closeTransports } from '../../src/mail/send.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { drain, sendLog, setup } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { startStubDns, type StubDns } from './stub-dns.ts';

describe('address verification', () => {
  let dns: StubDns;
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    dns = await startStubDns({
      'mx.example': { mx: [{ exchange: 'mail.mx.example', priority: 10 }] },
      'a-only.example': { a: ['192.0.2.10'] },
      'v6-only.example': { aaaa: ['2001:db8::10'] },
      'nullmx.example': { mx: [{ exchange: '.', priority: 0 }] },
      'empty.example': {},
      'broken.example': { rcode: 'SERVFAIL' },
      'silent.example': { silent: true },
      'mailinator.com': { mx: [{ exchange: 'mail.mailinator.com', priority: 10 }] },
      'slow.example': { mx: [{ exchange: 'mail.slow.example', priority: 10 }], delayMs: 300 },
    }, (name) => (name.endsWith('.bulk.example') ? { mx: [{ exchange: `mx.${name}`, priority: 10 }], delayMs: 8 } : undefined));
    t = await buildTestApp();
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
    await dns.close();
  });
  const resolver = () => mailDnsResolver({ servers: [dns.server], timeoutMs: 300, tries: 1 });

  test('each status from DNS answers: MX, A and AAAA fallback, null MX, NXDOMAIN, no records, SERVFAIL, timeout', async () => {
    const r = resolver();
    const cases: [string, string, RegExp][] = [
      ['mx.example', 'valid', /MX/],
      ['a-only.example', 'valid', /no MX; A record/],
      ['v6-only.example', 'valid', /no MX; AAAA record/],
      ['nullmx.example', 'invalid', /null MX/],
      ['nowhere.example', 'invalid', /does not exist/],
      ['empty.example', 'invalid', /no MX, A or AAAA/],
      ['broken.example', 'unknown', /DNS did not answer \(ESERVFAIL\)/],
      ['silent.example', 'unknown', /DNS did not answer \(ETIMEOUT\)/],
    ];
    for (const [domain, status, reason] of cases) {
      const v = await checkDomain(r, domain);
      assert.equal(v.status, status, `${domain}: ${JSON.stringify(v)}`);
      assert.match(v.reason, reason, domain);
    }
  });

  test('addresses: syntax, disposable domains (maintained list), role addresses', () => {
    const valid = { status: 'valid' as const, reason: 'MX record' };
    assert.deepEqual(verdictFor('ada@mx.example', valid), valid);
    assert.equal(verdictFor('ada@mailinator.com', valid).status, 'risky');
    assert.match(verdictFor('ada@sub.mailinator.com', valid).reason, /disposable/);
    assert.equal(verdictFor('postmaster@mx.example', valid).status, 'risky');
    assert.equal(verdictFor('info+news@mx.example', valid).status, 'risky');
    for (const bad of ['a..b@mx.example', '.a@mx.example', 'a@-mx.example', 'a@mx', 'a@mx.123', `${'x'.repeat(65)}@mx.example`, `a@${'d'.repeat(250)}.example`]) {
      assert.ok(syntaxProblem(bad), bad);
      assert.equal(verdictFor(bad, valid).status, 'invalid', bad);
    }
    assert.equal(verdictFor('ada@mx.example', { status: 'unknown', reason: 'DNS did not answer' }).status, 'unknown');
  });

  test('the cache: one lookup per domain per batch, concurrent prefetches coalesce, fresh verdicts are not looked up again', async () => {
    const before = dns.questions.length;
    const emails = Array.from({ length: 500 }, (_, i) => `u${i}@${i % 2 ? 'mx.example' : 'a-only.example'}`);
    await Promise.all([prefetchDomains(t.database.db, resolver(), emails), prefetchDomains(t.database.db, resolver(), emails)]);
    const asked = dns.questions.slice(before);
    assert.equal(asked.filter((q) => q === 'MX mx.example').length, 1, asked.join(', '));
    assert.equal(asked.filter((q) => q === 'MX a-only.example').length, 1);
    assert.equal(await prefetchDomains(t.database.db, resolver(), emails), 0, 'both fresh: no lookup');
    // An unknown verdict is kept an hour, an answer a day.
    await prefetchDomains(t.database.db, resolver(), ['x@broken.example']);
    await sql`UPDATE mail_domain_checks SET checked_at = now() - interval '2 hours' WHERE domain IN ('broken.example', 'mx.example')`.execute(t.database.db);
    assert.equal(await prefetchDomains(t.database.db, resolver(), ['x@broken.example', 'y@mx.example']), 1, 'only the unknown one is looked up again');
  });

  test('the worst batch: 5,000 addresses on 5,000 domains with a slow server stay bounded', async () => {
    const emails = Array.from({ length: 5000 }, (_, i) => `u@d${i}.bulk.example`);
    const started = performance.now();
    const n = await prefetchDomains(t.database.db, resolver(), emails);
    const ms = performance.now() - started;
    assert.equal(n, 5000);
    // 8 ms an answer, VERIFY_CONCURRENCY at a time: about 5000 × 8 / 8 = 5 s of waiting, whatever the domains.
    assert.ok(ms < (5000 * 8 * 1.5) / VERIFY_CONCURRENCY + 5000, `${ms.toFixed(0)} ms`);
    const stored = await sql<{ n: number }>`SELECT count(*)::int AS n FROM mail_domain_checks WHERE domain LIKE '%.bulk.example' AND status = 'valid'`.execute(t.database.db);
    assert.equal(stored.rows[0]!.n, 5000);
  });

  test('the budget holds under two concurrent callers: never more verifications than max_budget', async () => {
    await prefetchDomains(t.database.db, resolver(), ['x@mx.example']);
    const s = await setup(t, sink.port);
    const { rows: contacts } = await sql<{ id: string; email: string }>`
      INSERT INTO contacts (team_id, email, created_at, updated_at)
      SELECT ${s.teamId}::uuid, 'b' || g || '@mx.example', now(), now() FROM generate_series(1, 30) g RETURNING id, email`.execute(t.database.db);
    const res = await s.a.post('/email/campaigns', {
      name: 'B', campaign_type: 'broadcast', template_ids: [s.templateId], mail_account_ids: [s.accountId],
      broadcast_send: { scheduled_send_time: new Date(Date.now() + 3_600_000).toISOString() },
      verification_data: { active: true, max_budget: 25 },
    });
    assert.equal(res.statusCode, 201, res.body);
    const sendId = res.json().campaign.campaign_sends[0].id;
    const settings = { active: true, acceptable_statuses: ['valid'], max_budget: 25, age_threshold: 0 };
    const half = (part: typeof contacts) => t.database.db.transaction().execute(async (trx) => {
      await sql`SELECT 1 FROM campaign_sends WHERE id = ${sendId} FOR UPDATE`.execute(trx);
      return verifyForSend(trx, { teamId: s.teamId, sendId, contacts: part, settings });
    });
    const [a, b] = await Promise.all([half(contacts.slice(0, 15)), half(contacts.slice(15))]);
    const all = [...a.values(), ...b.values()];
    assert.equal(all.filter((r) => r === null).length, 25);
    assert.equal(all.filter((r) => r === 'verification_budget').length, 5);
    const used = await sql<{ n: number }>`SELECT verifications_used AS n FROM campaign_sends WHERE id = ${sendId}`.execute(t.database.db);
    assert.equal(used.rows[0]!.n, 25);
  });

  test('a broadcast with verification: invalid, risky and unknown skipped with their reasons, the budget skips the rest; results on the contacts', async () => {
    const s = await setup(t, sink.port);
    const names = ['ok1@mx.example', 'ok2@a-only.example', 'gone@nowhere.example', 'refuses@nullmx.example', 'temp@mailinator.com',
      'postmaster@mx.example', 'dns@broken.example', 'late1@mx.example', 'late2@mx.example'];
    for (const email of names) assert.equal((await s.a.post('/email/contacts/upsert', { email })).statusCode, 200);
    await drain(t);
    const res = await s.a.post('/email/campaigns', {
      name: 'Verified', campaign_type: 'broadcast', template_ids: [s.templateId], mail_account_ids: [s.accountId],
      verification_data: { active: true, acceptable_statuses: ['valid'], max_budget: 7, age_threshold: 30 },
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.deepEqual(res.json().campaign.campaign_sends[0].send_data.verification_data, { active: true, acceptable_statuses: ['valid'], max_budget: 7, age_threshold: 30 });
    await drain(t, { mailDns: resolver() });
    const sendId = res.json().campaign.campaign_sends[0].id;
    const { rows } = await sql<{ email: string; decision: string; reason: string | null }>`
      SELECT k.email, d.decision, d.reason FROM campaign_decisions d JOIN contacts k ON k.id = d.contact_id
       WHERE d.campaign_send_id = ${sendId} ORDER BY k.email`.execute(t.database.db);
    const got = Object.fromEntries(rows.map((r) => [r.email, r.reason ?? r.decision]));
    assert.deepEqual(got, {
      'dns@broken.example': 'verification_unknown',
      'gone@nowhere.example': 'verification_invalid',
      'late1@mx.example': 'verification_budget',
      'late2@mx.example': 'verification_budget',
      'ok1@mx.example': 'send',
      'ok2@a-only.example': 'send',
      'postmaster@mx.example': 'verification_risky',
      'refuses@nullmx.example': 'verification_invalid',
      'temp@mailinator.com': 'verification_risky',
    });
    const sent = (await sendLog(t, s.teamId)).map((l) => l.email).sort();
    assert.deepEqual(sent, ['ok1@mx.example', 'ok2@a-only.example']);
    const stored = await sql<{ email: string; validation_status: string | null; is_email_valid: boolean | null; validation_method: string | null; validation_reason: string | null }>`
      SELECT email, validation_status, is_email_valid, validation_method, validation_reason FROM contacts WHERE team_id = ${s.teamId} ORDER BY email`.execute(t.database.db);
    const by = Object.fromEntries(stored.rows.map((r) => [r.email, r]));
    assert.deepEqual([by['ok1@mx.example']!.validation_status, by['ok1@mx.example']!.is_email_valid, by['ok1@mx.example']!.validation_method], ['valid', true, 'mx']);
    assert.deepEqual([by['refuses@nullmx.example']!.validation_status, by['refuses@nullmx.example']!.is_email_valid], ['invalid', false]);
    assert.match(by['refuses@nullmx.example']!.validation_reason ?? '', /null MX/);
    assert.equal(by['temp@mailinator.com']!.validation_status, 'risky');
    assert.equal(by['dns@broken.example']!.validation_status, null, 'a DNS failure is not stored as a verdict');
    assert.equal(by['late1@mx.example']!.validation_status, null, 'past the budget: not verified');
  });
});
