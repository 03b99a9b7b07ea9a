import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  checkHost, isAllowedHost, isPublicAddress, parseAllowList, refusalFor, smtpPortRefusal,
} from '../../src/lib/net-guard.ts';
import { PUBLIC_LITERALS, REFUSED_LITERALS, REFUSED_NUMERIC } from './address-forms.ts';

const none = parseAllowList([]);
const neverResolves = async (): Promise<string[]> => {
  throw new Error('no DNS in this test');
};

describe('address classification (ipaddr.js, every textual form)', () => {
  test('only public unicast addresses pass', () => {
    for (const a of REFUSED_LITERALS) assert.equal(isPublicAddress(a), false, a);
    for (const a of REFUSED_NUMERIC) assert.equal(isPublicAddress(a), false, a);
    for (const a of ['not-an-ip', '', 'example.com', '1.2.3.4.5', '::g']) assert.equal(isPublicAddress(a), false, a);
    for (const a of PUBLIC_LITERALS) assert.equal(isPublicAddress(a), true, a);
  });

  test('the regression: the full hex form of an IPv4-mapped loopback is refused like the short one', () => {
    // The pattern this replaces matched only `::ffff:...`; these are the same 16 bytes.
    assert.equal(isPublicAddress('0:0:0:0:0:ffff:7f00:1'), false);
    assert.equal(isPublicAddress('0000:0000:0000:0000:0000:FFFF:7F00:0001'), false);
    assert.equal(isPublicAddress('[::ffff:7f00:1]'), false, 'bracketed');
  });

  test('an IPv4-compatible address is classified by its bytes, however it is written', () => {
    // ipaddr.js alone reads ::a.b.c.d as IPv4-mapped; the same address in hex must not differ.
    assert.equal(isPublicAddress('::93.184.215.14'), isPublicAddress('::5db8:d70e'));
    assert.equal(isPublicAddress('::93.184.215.14'), false);
  });

  test('an IPv4-mapped public address is that public address', () => {
    assert.equal(isPublicAddress('::ffff:93.184.215.14'), true);
    assert.equal(isPublicAddress('0:0:0:0:0:ffff:5db8:d70e'), true);
  });

  test('checkHost refuses every non-public literal and local name, naming the setting', async () => {
    for (const host of [...REFUSED_LITERALS, ...REFUSED_NUMERIC, 'localhost', 'LOCALHOST.', 'app.localhost', 'intranet', `[::1]`]) {
      const r = await checkHost(host, none, neverResolves);
      assert.equal(r.ok, false, host);
      assert.match(!r.ok ? r.problem : '', /ALLOWED_PRIVATE_TARGETS/, host);
    }
    for (const host of PUBLIC_LITERALS) assert.equal((await checkHost(host, none, neverResolves)).ok, true, host);
  });

  test('checkHost resolves a name and refuses it when any address is not public', async () => {
    const dns = async (h: string) =>
      ({ 'ok.example.com': ['93.184.215.14'], 'rebind.example.com': ['93.184.215.14', '::ffff:7f00:1'], 'md.example.com': ['169.254.169.254'] })[h] ?? [];
    assert.deepEqual(await checkHost('ok.example.com', none, dns), { ok: true, addresses: ['93.184.215.14'], resolved: true });
    const rebind = await checkHost('rebind.example.com', none, dns);
    assert.equal(rebind.ok, false);
    assert.match(!rebind.ok ? rebind.problem : '', /::ffff:7f00:1 is not a public address.*ALLOWED_PRIVATE_TARGETS/);
    assert.equal((await checkHost('md.example.com', none, dns)).ok, false);
    assert.deepEqual(await checkHost('nx.example.com', none, dns), { ok: true, addresses: [], resolved: false });
    assert.deepEqual(await checkHost('nx.example.com', none, neverResolves), { ok: true, addresses: [], resolved: false });
  });
});

describe('ALLOWED_PRIVATE_TARGETS entries', () => {
  test('hosts, addresses and ranges match every form of an address', () => {
    const allow = parseAllowList(['127.0.0.1', '10.0.0.0/8', 'Receiver.Internal.', '[::1]', 'fd00::/8']);
    for (const a of ['127.0.0.1', '::ffff:127.0.0.1', '0:0:0:0:0:ffff:7f00:1', '10.200.3.4', '::ffff:a00:1', '::1', '0:0:0:0:0:0:0:1', 'fd12::9']) {
      assert.equal(refusalFor(allow, 'x.example', a), null, a);
    }
    for (const a of ['127.0.0.2', '192.168.0.1', '::ffff:c0a8:1', 'fc00::1', '169.254.169.254']) {
      assert.notEqual(refusalFor(allow, 'x.example', a), null, a);
    }
    assert.equal(isAllowedHost(allow, 'receiver.internal'), true);
    assert.equal(refusalFor(allow, 'RECEIVER.internal.', '192.168.0.1'), null, 'an allowed name may resolve anywhere');
  });

  test('a mapped CIDR is the IPv4 range it maps', () => {
    const allow = parseAllowList(['::ffff:10.0.0.0/104']);
    assert.equal(refusalFor(allow, 'x', '10.1.2.3'), null);
    assert.notEqual(refusalFor(allow, 'x', '172.16.0.1'), null);
    assert.throws(() => parseAllowList(['::ffff:10.0.0.0/8']), /at least 96/);
  });

  test('bad entries are refused', () => {
    for (const bad of ['10.0.0.0/33', '::/129', '10.0.0.0/x', 'http://x', 'a b', '10.0.0.0/']) {
      assert.throws(() => parseAllowList([bad]), /CIDR|not a host name/, bad);
    }
  });

  test('SMTP ports: a public host only 25, 465, 587, 2525; an allowed one any', () => {
    const allow = parseAllowList(['127.0.0.0/8', 'smtp.internal']);
    for (const port of [25, 465, 587, 2525]) assert.equal(smtpPortRefusal(none, 'smtp.example.com', port, ['93.184.215.14']), null);
    for (const port of [22, 80, 443, 6379, 5432, 2526]) {
      assert.match(smtpPortRefusal(none, 'smtp.example.com', port, ['93.184.215.14']) ?? '', /ALLOWED_PRIVATE_TARGETS/, String(port));
    }
    assert.notEqual(smtpPortRefusal(none, 'smtp.example.com', 22, []), null, 'an unresolved name gets the public rule');
    assert.equal(smtpPortRefusal(allow, '127.0.0.1', 6379, ['127.0.0.1']), null);
    assert.equal(smtpPortRefusal(allow, 'smtp.internal', 1025, []), null);
    assert.notEqual(smtpPortRefusal(allow, 'mixed.example', 22, ['127.0.0.1', '93.184.215.14']), null, 'every address must be allowed');
  });
});
