import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isPublicAddress, parseAllowList } from '../../src/lib/net-guard.ts';
import { checkTargetUrl } from '../../src/webhooks/guard.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { PUBLIC_LITERALS, REFUSED_LITERALS, REFUSED_NUMERIC, urlHost } from '../lib/address-forms.ts';

const none = parseAllowList([]);
const neverResolves = async () => {
  throw new Error('no DNS in this test');
};

describe('target safety (SSRF)', () => {
  test('public and non-public addresses', () => {
    for (const a of ['93.184.215.14', '8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '2a00:1450:4001:82a::200e']) {
      assert.equal(isPublicAddress(a), true, a);
    }
    for (const a of [
      '127.0.0.1', '127.255.0.9', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.0.10', '169.254.169.254', '100.64.0.1',
      '100.127.255.254', '0.0.0.0', '224.0.0.251', '239.1.1.1', '255.255.255.255', '240.0.0.1', '198.18.0.1', '192.0.2.1',
      '::', '::1', 'fc00::1', 'fd12:3456::1', 'fe80::1', 'ff02::1', '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:a9fe:a9fe',
      '64:ff9b::7f00:1', '2002:7f00:1::', '2001:db8::1', '2001::1', 'not-an-ip',
    ]) {
      assert.equal(isPublicAddress(a), false, a);
    }
  });

  test('URLs refused at create: scheme, credentials, private and tricky hosts', async () => {
    const refused = [
      'http://93.184.215.14/hook', 'ftp://93.184.215.14/', 'not a url', '/relative', 'https://user:pw@93.184.215.14/',
      'https://127.0.0.1/', 'https://localhost/', 'https://app.localhost/', 'https://intranet/', 'https://10.0.0.1/',
      'https://172.16.0.1/', 'https://192.168.1.1/', 'https://169.254.169.254/latest/meta-data/', 'https://100.64.0.1/',
      'https://224.0.0.1/', 'https://0.0.0.0/', 'https://[::1]/', 'https://[fc00::1]/', 'https://[fe80::1]/',
      'https://[::ffff:127.0.0.1]/', 'https://[::ffff:a9fe:a9fe]/', 'https://2130706433/', 'https://0x7f000001/',
      'https://0177.0.0.1/', 'https://127.1/', 'https://0x7f.1/', 'https://017700000001/', 'https://[64:ff9b::a00:1]/',
      'https://[2002:c0a8:101::]/', 'https://unresolvable.example/',
    ];
    for (const url of refused) assert.notEqual(await checkTargetUrl(url, none, neverResolves), null, url);
    assert.equal(await checkTargetUrl('https://93.184.215.14:8443/hook?x=1', none, neverResolves), null);
    assert.equal(await checkTargetUrl('https://[2606:4700:4700::1111]/', none, neverResolves), null);
  });

  test('a host name must resolve only to public addresses', async () => {
    const resolver = (map: Record<string, string[]>) => async (h: string) => map[h] ?? [];
    const dns = resolver({
      'hooks.example.com': ['93.184.215.14', '2606:4700:4700::1111'],
      'rebind.example.com': ['93.184.215.14', '127.0.0.1'],
      'metadata.example.com': ['169.254.169.254'],
      'empty.example.com': [],
    });
    assert.equal(await checkTargetUrl('https://hooks.example.com/x', none, dns), null);
    assert.match((await checkTargetUrl('https://rebind.example.com/x', none, dns))!, /127\.0\.0\.1/);
    assert.match((await checkTargetUrl('https://metadata.example.com/x', none, dns))!, /169\.254\.169\.254/);
    assert.match((await checkTargetUrl('https://empty.example.com/x', none, dns))!, /does not resolve/);
  });

  test('ALLOWED_PRIVATE_TARGETS allows given hosts, IPs and ranges, and plain http for them', async () => {
    const allow = parseAllowList(['127.0.0.1', '10.0.0.0/8', 'receiver.internal', '::1']);
    assert.equal(await checkTargetUrl('http://127.0.0.1:8080/hook', allow, neverResolves), null);
    assert.equal(await checkTargetUrl('https://10.9.8.7/hook', allow, neverResolves), null);
    assert.equal(await checkTargetUrl('http://receiver.internal/hook', allow, neverResolves), null);
    assert.equal(await checkTargetUrl('http://[::1]:9000/', allow, neverResolves), null);
    assert.notEqual(await checkTargetUrl('https://127.0.0.2/', allow, neverResolves), null, 'only the listed address');
    assert.notEqual(await checkTargetUrl('https://192.168.0.1/', allow, neverResolves), null);
    assert.notEqual(await checkTargetUrl('http://93.184.215.14/', allow, neverResolves), null, 'http only for allowed targets');
    assert.throws(() => parseAllowList(['10.0.0.0/33']), /CIDR/);
    assert.throws(() => parseAllowList(['http://x']), /not a host name/);
  });
});

describe('target safety through the API', () => {
  let t: TestApp;
  before(async () => {
    // The production rules: no private target allowed (the test default allows loopback).
    t = await buildTestApp({ config: { allowedPrivateTargets: [] } });
  });
  after(() => t.close());

  const refusedUrls = [
    ...[...REFUSED_LITERALS, ...REFUSED_NUMERIC].map((h) => `https://${urlHost(h)}/x`),
    'https://[::]/', 'https://0.0.0.0:8080/', 'https://localhost/', 'https://LOCALHOST./', 'https://intranet/',
  ];

  test('create refuses every non-public form with 422 naming url and ALLOWED_PRIVATE_TARGETS, and writes nothing', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const call = (url: string) =>
      t.app.inject({ method: 'POST', url: '/public/v1/webhooks', headers: { 'x-api-key': key }, payload: { url, events: ['email.sent'] } });
    for (const url of [...refusedUrls, 'http://93.184.215.14/']) {
      const res = await call(url);
      assert.equal(res.statusCode, 422, url);
      const error = res.json().error;
      assert.equal(error.code, 'VALIDATION_FAILED');
      assert.equal(error.details[0].field, 'url');
      assert.match(error.details[0].message, /ALLOWED_PRIVATE_TARGETS/, url);
    }
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM webhooks WHERE team_id = $1', [teamId]);
    assert.equal(rows[0].n, 0);
    for (const h of PUBLIC_LITERALS) assert.equal((await call(`https://${urlHost(h)}/ok`)).statusCode, 201, h);
  });

  test('update refuses every non-public form with 422 and changes nothing', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const call = (method: 'POST' | 'PATCH', url: string, payload: object) =>
      t.app.inject({ method, url: `/public/v1/webhooks${url}`, headers: { 'x-api-key': key }, payload });
    const w = (await call('POST', '', { url: 'https://93.184.215.14/ok', events: ['email.sent'] })).json().webhook;
    for (const url of refusedUrls) {
      const res = await call('PATCH', `/${w.id}`, { url, description: 'changed' });
      assert.equal(res.statusCode, 422, url);
      assert.equal(res.json().error.details[0].field, 'url');
      assert.match(res.json().error.details[0].message, /ALLOWED_PRIVATE_TARGETS/, url);
    }
    const { rows } = await t.database.pool.query('SELECT url, description FROM webhooks WHERE team_id = $1', [teamId]);
    assert.deepEqual(rows, [{ url: 'https://93.184.215.14/ok', description: null }]);
  });

  test('a name that resolves to a private address is refused at create', async () => {
    const dns = async (h: string) => ({ 'rebind.example.com': ['93.184.215.14', '0:0:0:0:0:ffff:7f00:1'] })[h] ?? [];
    const strict = await buildTestApp({ config: { allowedPrivateTargets: [] }, deps: { resolveHost: dns } });
    try {
      const { key } = await makeTeam(strict.database.db);
      const res = await strict.app.inject({
        method: 'POST', url: '/public/v1/webhooks', headers: { 'x-api-key': key },
        payload: { url: 'https://rebind.example.com/x', events: ['email.sent'] },
      });
      assert.equal(res.statusCode, 422);
      assert.match(res.json().error.details[0].message, /0:0:0:0:0:ffff:7f00:1 is not a public address.*ALLOWED_PRIVATE_TARGETS/);
    } finally {
      await strict.close();
    }
  });
});
