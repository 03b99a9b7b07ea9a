// DKIM per mail account: keys made through the API, the TXT record we tell the
// team to publish served by a stub DNS resolver, mail captured by an SMTP sink
// on 127.0.0.1 and verified by mailauth's verifier (an independent
// implementation of RFC 6376 / 8463) against the same stub. RSA, Ed25519, both
// at once, a rotation, a tampered body; the DNS check; the API's errors and
// team isolation; the private key at rest.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { dkimVerify } from 'mailauth';
import { closeTransports } from '../../src/mail/send.ts';
import { SecretBox } from '../../src/lib/secrets.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { api, createCampaign, createTemplate, drain, insertAccount, type Api } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink, type Received } from '../engine/sink.ts';

/** A DNS zone in memory: TXT records by name (as character-strings), and names that fail. */
class StubDns {
  readonly txt = new Map<string, string[][]>();
  readonly failing = new Set<string>();
  lookups: string[] = [];

  /** Publishes a record as a DNS server would hold it: split into strings of at most 255 characters. */
  publish(name: string, value: string): void {
    const chunks: string[] = [];
    for (let i = 0; i < value.length; i += 255) chunks.push(value.slice(i, i + 255));
    this.txt.set(name.toLowerCase(), [...(this.txt.get(name.toLowerCase()) ?? []), chunks]);
  }

  unpublish(name: string): void {
    this.txt.delete(name.toLowerCase());
  }

  /** Our resolver's shape: (name) → TXT records. */
  readonly resolveTxt = async (name: string): Promise<string[][]> => {
    this.lookups.push(name);
    const key = name.toLowerCase().replace(/\.$/, '');
    if (this.failing.has(key)) throw Object.assign(new Error(`${name}: timeout`), { code: 'ETIMEOUT' });
    const found = this.txt.get(key);
    if (!found) throw Object.assign(new Error(`${name}: not found`), { code: 'ENOTFOUND' });
    return found;
  };

  /** mailauth's shape: (name, rrtype) → records. */
  readonly mailauthResolver = async (name: string, rrtype: string): Promise<string[][]> => {
    if (rrtype !== 'TXT') throw Object.assign(new Error('no such record'), { code: 'ENOTFOUND' });
    return this.resolveTxt(name);
  };
}

describe('DKIM', () => {
  let t: TestApp;
  let sink: CaptureSink;
  const dns = new StubDns();
  before(async () => {
    t = await buildTestApp({ deps: { resolveTxt: dns.resolveTxt } });
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  // Each team sends from its own domain, as teams do: the stub zone is shared by the tests.
  let teams = 0;
  async function team(fromEmail = `news@t${++teams}.plover.test`) {
    const { teamId, key } = await makeTeam(t.database.db);
    const a = api(t, key);
    const accountId = await insertAccount(t, teamId, sink.port, { from_email: fromEmail });
    const templateId = await createTemplate(a, { content: '<html><body><p>Hi {{ contact.first_name | default: "there" }}</p></body></html>' });
    return { teamId, key, a, accountId, templateId };
  }

  const del = (key: string, url: string) => t.app.inject({ method: 'DELETE', url: `/public/v1${url}`, headers: { 'x-api-key': key } });

  async function newKey(a: Api, accountId: string, body: Record<string, unknown>) {
    const res = await a.post(`/email/mail-accounts/${accountId}/dkim`, body);
    assert.equal(res.statusCode, 201, res.body);
    return res.json().dkim_key;
  }

  /** Publishes the record the API told us to publish, then activates the key. */
  async function publishAndActivate(a: Api, accountId: string, key: { id: string; dns_record: { name: string; value: string } }) {
    dns.publish(key.dns_record.name, key.dns_record.value);
    const res = await a.post(`/email/mail-accounts/${accountId}/dkim/${key.id}/activate`, {});
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().dkim_key.status, 'active');
    return res.json().dkim_key;
  }

  /** Submits one transactional e-mail and returns it as the SMTP server received it. */
  async function sendOne(s: Awaited<ReturnType<typeof team>>, to: string): Promise<Received> {
    const res = await s.a.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: to });
    assert.equal(res.statusCode, 202, res.body);
    await drain(t);
    const got = sink.messages.filter((m) => m.to.includes(to));
    assert.equal(got.length, 1, `one message to ${to}`);
    return got[0]!;
  }

  const verify = (raw: string) => dkimVerify(Buffer.from(raw), { resolver: dns.mailauthResolver as never });

  test('an RSA key: pending until published and activated, then every message carries a signature that verifies', async () => {
    const s = await team();
    const key = await newKey(s.a, s.accountId, { algorithm: 'rsa' });
    assert.equal(key.status, 'pending');
    assert.equal(key.algorithm, 'rsa');
    const domain = `t${teams}.plover.test`;
    assert.equal(key.domain, domain);
    assert.match(key.selector, /^rsa\d{8}$/);
    assert.equal(key.dns_record.type, 'TXT');
    assert.equal(key.dns_record.name, `${key.selector}._domainkey.${domain}`);
    assert.match(key.dns_record.value, /^v=DKIM1; k=rsa; p=[A-Za-z0-9+/]+=*$/);
    assert.ok(!/PRIVATE/i.test(JSON.stringify(key)), 'no private key in the answer');

    // Pending: nothing signs yet.
    const unsigned = await sendOne(s, 'pending@example.com');
    assert.ok(!/^DKIM-Signature:/im.test(unsigned.raw), 'a pending key does not sign');

    // Not published: activation is refused and nothing changes.
    const early = await s.a.post(`/email/mail-accounts/${s.accountId}/dkim/${key.id}/activate`, {});
    assert.equal(early.statusCode, 409, early.body);
    assert.equal(early.json().error.code, 'CONFLICT');
    assert.equal(early.json().error.details[0].field, 'dns');
    assert.match(early.json().error.details[0].message, /no DKIM record/);

    await publishAndActivate(s.a, s.accountId, key);
    const msg = await sendOne(s, 'rsa@example.com');
    const result = await verify(msg.raw);
    assert.equal(result.results.length, 1, msg.raw.slice(0, 2000));
    const [r] = result.results;
    assert.equal(r!.status.result, 'pass', r!.status.comment);
    assert.equal(r!.signingDomain, domain);
    assert.equal(r!.selector, key.selector);
    assert.equal(r!.algo, 'rsa-sha256');
    assert.equal(r!.status.aligned, domain, 'd= aligns with the From domain (DMARC)');
  });

  test('an Ed25519 key signs ed25519-sha256 (RFC 8463), on campaign mail too', async () => {
    const s = await team();
    const key = await publishAndActivate(s.a, s.accountId, await newKey(s.a, s.accountId, { algorithm: 'ed25519', selector: 'Mail-Ed' }));
    assert.equal(key.selector, 'mail-ed', 'selectors are lower-cased');
    assert.match(key.dns_record.value, /^v=DKIM1; k=ed25519; p=[A-Za-z0-9+/]{43}=$/, 'the bare 32-byte key');
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    await s.a.post('/email/contacts/upsert', { email: 'camp-ed@example.com', first_name: 'Ed' });
    await drain(t);
    const msg = sink.messages.find((m) => m.to.includes('camp-ed@example.com'));
    assert.ok(msg, 'the campaign message was sent');
    assert.match(msg.raw, /^List-Unsubscribe-Post:/im, 'campaign mail carries one-click unsubscribe');
    const { results } = await verify(msg.raw);
    assert.equal(results.length, 1);
    assert.equal(results[0]!.status.result, 'pass', results[0]!.status.comment);
    assert.equal(results[0]!.algo, 'ed25519-sha256');
    // RFC 8058: both List-Unsubscribe fields must be covered by the signature.
    const h = /\bh=([^;]+);/.exec(msg.raw.replace(/\r\n[ \t]+/g, ''))![1]!.toLowerCase().split(':').map((x) => x.trim());
    assert.ok(h.includes('list-unsubscribe') && h.includes('list-unsubscribe-post') && h.includes('from'), h.join(':'));
  });

  test('RSA and Ed25519 at once: two signatures, both verify', async () => {
    const s = await team();
    const rsa = await publishAndActivate(s.a, s.accountId, await newKey(s.a, s.accountId, { algorithm: 'rsa' }));
    const ed = await publishAndActivate(s.a, s.accountId, await newKey(s.a, s.accountId, { algorithm: 'ed25519' }));
    const msg = await sendOne(s, 'both@example.com');
    const { results } = await verify(msg.raw);
    assert.deepEqual(results.map((r) => [r.algo, r.selector, r.status.result]).sort((x, y) => String(x[0]).localeCompare(String(y[0]))), [
      ['ed25519-sha256', ed.selector, 'pass'],
      ['rsa-sha256', rsa.selector, 'pass'],
    ]);
    const list = (await s.a.get(`/email/mail-accounts/${s.accountId}/dkim`)).json().dkim_keys;
    assert.deepEqual(list.map((k: any) => k.status), ['active', 'active'], 'one active key per algorithm');
  });

  test('rotation: the old key signs until the new one is activated, then retires; mail signed by either verifies', async () => {
    const s = await team();
    const old = await publishAndActivate(s.a, s.accountId, await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'jan' }));
    const next = await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'feb' });
    assert.equal(next.status, 'pending');

    const during = await sendOne(s, 'during@example.com');
    const d = await verify(during.raw);
    assert.deepEqual(d.results.map((r) => [r.selector, r.status.result]), [['jan', 'pass']], 'the old key still signs while the new one waits');

    const activated = await publishAndActivate(s.a, s.accountId, next);
    assert.ok(activated.activated_at);
    const keys = (await s.a.get(`/email/mail-accounts/${s.accountId}/dkim`)).json().dkim_keys;
    const byId = new Map(keys.map((k: any) => [k.id, k]));
    assert.equal((byId.get(old.id) as any).status, 'retired');
    assert.ok((byId.get(old.id) as any).retired_at);
    assert.equal((byId.get(next.id) as any).status, 'active');

    const afterwards = await sendOne(s, 'after@example.com');
    const a = await verify(afterwards.raw);
    assert.deepEqual(a.results.map((r) => [r.selector, r.status.result]), [['feb', 'pass']]);
    // Mail signed before the switch still verifies while the old record stays published.
    assert.equal((await verify(during.raw)).results[0]!.status.result, 'pass');

    // Activating the active key again changes nothing; a retired key can come back (a rollback).
    const again = await s.a.post(`/email/mail-accounts/${s.accountId}/dkim/${next.id}/activate`, {});
    assert.equal(again.statusCode, 200);
    assert.equal(again.json().dkim_key.activated_at, activated.activated_at);
    const back = await s.a.post(`/email/mail-accounts/${s.accountId}/dkim/${old.id}/activate`, {});
    assert.equal(back.statusCode, 200, back.body);
    const states = (await s.a.get(`/email/mail-accounts/${s.accountId}/dkim`)).json().dkim_keys.map((k: any) => [k.selector, k.status]);
    assert.deepEqual(states.sort((x: string[], y: string[]) => x[0]!.localeCompare(y[0]!)), [['feb', 'retired'], ['jan', 'active']]);
  });

  test('a tampered body or header fails verification; a record with another key fails too', async () => {
    const s = await team();
    const key = await publishAndActivate(s.a, s.accountId, await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'tamper' }));
    const msg = await sendOne(s, 'tamper@example.com');
    assert.equal((await verify(msg.raw)).results[0]!.status.result, 'pass');

    const at = msg.raw.indexOf('Hi there');
    assert.ok(at > 0, 'the body text is in the message');
    const body = msg.raw.slice(0, at) + 'Hi thera' + msg.raw.slice(at + 'Hi there'.length);
    const b = (await verify(body)).results[0]!;
    assert.equal(b.status.result, 'neutral');
    assert.match(b.status.comment ?? '', /body hash/i);

    const header = msg.raw.replace(/^Subject: .*$/m, 'Subject: You won a prize');
    assert.notEqual(header, msg.raw);
    assert.equal((await verify(header)).results[0]!.status.result, 'fail');

    // Another key at our selector (a wrong record published): the signature does not verify.
    dns.unpublish(key.dns_record.name);
    const other = await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'other' });
    dns.publish(key.dns_record.name, other.dns_record.value);
    assert.equal((await verify(msg.raw)).results[0]!.status.result, 'fail');
  });

  test('check DNS: SPF, each key found / missing / mismatch, DMARC at the organisational domain, failed lookups', async () => {
    const s = await team('hello@mail.shop-dns.test');
    const ok = await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'ok' });
    const missing = await newKey(s.a, s.accountId, { algorithm: 'ed25519', selector: 'missing' });
    const wrong = await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'wrong' });
    assert.equal(ok.domain, 'mail.shop-dns.test');
    dns.publish(ok.dns_record.name, ok.dns_record.value);
    dns.publish(wrong.dns_record.name, ok.dns_record.value);
    dns.publish('mail.shop-dns.test', 'google-site-verification=abc');
    dns.publish('mail.shop-dns.test', 'v=spf1 include:_spf.example.net ~all');
    dns.publish('_dmarc.shop-dns.test', 'v=DMARC1; p=quarantine; rua=mailto:d@shop-dns.test');

    const res = await s.a.get(`/email/mail-accounts/${s.accountId}/dns-check`);
    assert.equal(res.statusCode, 200, res.body);
    const report = res.json().dns;
    assert.equal(report.domain, 'mail.shop-dns.test');
    assert.equal(report.spf.status, 'found');
    assert.deepEqual(report.spf.records, ['v=spf1 include:_spf.example.net ~all']);
    assert.equal(report.dmarc.status, 'found');
    assert.equal(report.dmarc.name, '_dmarc.shop-dns.test', 'found at the organisational domain');
    assert.equal(report.dmarc.policy, 'quarantine');
    const bySelector = Object.fromEntries(report.dkim.map((k: any) => [k.selector, k]));
    assert.equal(bySelector.ok.status, 'found');
    assert.equal(bySelector.ok.key_status, 'pending');
    assert.equal(bySelector.missing.status, 'missing');
    assert.equal(bySelector.missing.key_id, missing.id);
    assert.equal(bySelector.wrong.status, 'mismatch');
    assert.equal(bySelector.wrong.key_id, wrong.id);

    // Two SPF records are an error for receivers; a lookup that times out is reported, not a 500.
    dns.publish('mail.shop-dns.test', 'v=spf1 -all');
    dns.failing.add('_dmarc.mail.shop-dns.test');
    const second = (await s.a.get(`/email/mail-accounts/${s.accountId}/dns-check`)).json().dns;
    assert.equal(second.spf.status, 'invalid');
    assert.equal(second.dmarc.status, 'error');
    assert.match(second.dmarc.message, /timed out/);

    const bare = await team('a@nothing-here.test');
    const none = (await bare.a.get(`/email/mail-accounts/${bare.accountId}/dns-check`)).json().dns;
    assert.deepEqual([none.spf.status, none.dmarc.status, none.dkim.length], ['missing', 'missing', 0]);
  });

  test('errors: bad input 422, a used selector 409, at most 10 keys, force, delete; another team\'s account and keys are 404', async () => {
    const s = await team();
    const url = `/email/mail-accounts/${s.accountId}/dkim`;
    for (const body of [{ algorithm: 'dsa' }, {}, { algorithm: 'rsa', selector: 'bad_selector' }, { algorithm: 'rsa', selector: '-x' }, { algorithm: 'rsa', extra: 1 }]) {
      const res = await s.a.post(url, body);
      assert.equal(res.statusCode, 422, `${JSON.stringify(body)}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    }
    const first = await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'one' });
    const dup = await s.a.post(url, { algorithm: 'ed25519', selector: 'ONE' });
    assert.equal(dup.statusCode, 409, dup.body);
    assert.equal(dup.json().error.details[0].field, 'selector');
    // Default selectors never collide: the second of the day gets a suffix.
    const d1 = await newKey(s.a, s.accountId, { algorithm: 'ed25519' });
    const d2 = await newKey(s.a, s.accountId, { algorithm: 'ed25519' });
    assert.equal(d2.selector, `${d1.selector}-2`);

    const forced = await s.a.post(`${url}/${first.id}/activate`, { force: true });
    assert.equal(forced.statusCode, 200, forced.body);
    assert.equal(forced.json().dkim_key.status, 'active');

    // Concurrent creates cannot pass the cap together (the account is locked while one is written).
    const burst = await Promise.all(Array.from({ length: 9 }, (_, i) => s.a.post(url, { algorithm: 'ed25519', selector: `fill${i}` })));
    assert.deepEqual(burst.map((r) => r.statusCode).sort((x, y) => x - y), [201, 201, 201, 201, 201, 201, 201, 422, 422]);
    const over = await s.a.post(url, { algorithm: 'ed25519', selector: 'eleven' });
    assert.equal(over.statusCode, 422, over.body);
    assert.match(over.json().error.details[0].message, /at most 10/);
    assert.equal((await del(s.key, `${url}/${d2.id}`)).statusCode, 200);
    assert.equal((await del(s.key, `${url}/${d2.id}`)).statusCode, 404);
    assert.equal((await s.a.post(url, { algorithm: 'ed25519', selector: 'eleven' })).statusCode, 201, 'room again after a delete');

    // Another team sees nothing of it, under its own key.
    const other = await team();
    const theirs = api(t, other.key);
    assert.equal((await theirs.get(url)).statusCode, 404);
    assert.equal((await theirs.post(url, { algorithm: 'rsa' })).statusCode, 404);
    assert.equal((await theirs.post(`${url}/${first.id}/activate`, { force: true })).statusCode, 404);
    assert.equal((await theirs.get(`/email/mail-accounts/${s.accountId}/dns-check`)).statusCode, 404);
    assert.equal((await del(other.key, `${url}/${first.id}`)).statusCode, 404);
    // Its own account with our key id: still 404.
    assert.equal((await theirs.post(`/email/mail-accounts/${other.accountId}/dkim/${first.id}/activate`, { force: true })).statusCode, 404);
    assert.equal((await s.a.get(`/email/mail-accounts/not-a-uuid/dkim`)).statusCode, 404);
    assert.equal((await s.a.post(`${url}/not-a-uuid/activate`, {})).statusCode, 404);
    const keys = (await s.a.get(url)).json().dkim_keys;
    assert.equal(keys.length, 10);
    assert.equal(keys.find((k: any) => k.id === first.id).status, 'active', 'untouched by the other team');
  });

  test('a key that cannot be opened (another installation secret) signs nothing; the message still goes, signed by the others', async () => {
    const s = await team();
    const rsa = await publishAndActivate(s.a, s.accountId, await newKey(s.a, s.accountId, { algorithm: 'rsa', selector: 'good' }));
    const ed = await publishAndActivate(s.a, s.accountId, await newKey(s.a, s.accountId, { algorithm: 'ed25519', selector: 'broken' }));
    const foreign = new SecretBox('another secret of enough length 0123456789', 'dkim-private-key').seal('-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n');
    await t.database.db.updateTable('dkim_keys').set({ private_key_enc: foreign }).where('id', '=', ed.id).execute();
    const msg = await sendOne(s, 'half-signed@example.com');
    const { results } = await verify(msg.raw);
    assert.deepEqual(results.map((r) => [r.selector, r.status.result]), [[rsa.selector, 'pass']]);
    const [log] = await t.database.db.selectFrom('email_send_log').select('status').where('team_id', '=', s.teamId).execute();
    assert.equal(log!.status, 'sent');
  });

  test('the private key is stored sealed, and opens only with the installation secret', async () => {
    const s = await team();
    const key = await newKey(s.a, s.accountId, { algorithm: 'ed25519', selector: 'sealed' });
    const row = await t.database.db.selectFrom('dkim_keys').select(['private_key_enc']).where('id', '=', key.id).executeTakeFirstOrThrow();
    assert.ok(!row.private_key_enc.toString('latin1').includes('PRIVATE KEY'), 'no PEM in clear');
    const pem = new SecretBox(t.app.deps.config.appSecret!, 'dkim-private-key').open(row.private_key_enc);
    assert.match(pem, /^-----BEGIN PRIVATE KEY-----/);
    assert.throws(() => new SecretBox('another secret of enough length 0123456789', 'dkim-private-key').open(row.private_key_enc));
  });
});
