import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BOT_THRESHOLD, classifyHit, mailProxy, scannerByNetwork, scannerByUserAgent, WEIGHTS, type BotSignals } from '../../src/mail/bots.ts';
import { BROWSER_UA } from './fixtures.ts';

const person: BotSignals = {
  kind: 'click',
  method: 'GET',
  userAgent: BROWSER_UA,
  ip: '203.0.113.7',
  secondsSinceSent: 3600,
  honeypotFollowed: false,
  otherLinksClickedRecently: 0,
};
const judge = (over: Partial<BotSignals>) => classifyHit({ ...person, ...over }).decision;

describe('bot scoring', () => {
  test('a browser GET an hour after sending is a person, with no reasons', () => {
    assert.deepEqual(judge({}), { is_bot: false, bot_score: 0, reasons: [] });
    assert.deepEqual(judge({ kind: 'open' }), { is_bot: false, bot_score: 0, reasons: [] });
  });

  const strong: [string, Partial<BotSignals>, string][] = [
    ['automated user agent', { userAgent: 'python-requests/2.32.3' }, 'bot_user_agent'],
    ['HEAD request', { method: 'HEAD' }, 'head_request'],
    ['open within 5 s of sending', { kind: 'open', secondsSinceSent: 2 }, 'immediate_after_send'],
    ['click within 10 s of sending', { secondsSinceSent: 8 }, 'immediate_after_send'],
    ['the honeypot link itself', { kind: 'honeypot' }, 'honeypot'],
    ['after the honeypot was followed', { honeypotFollowed: true }, 'honeypot_followed'],
    ['a second link within 2 s', { otherLinksClickedRecently: 1 }, 'rapid_multi_click'],
    ['no user agent', { userAgent: null }, 'missing_user_agent'],
    ['Barracuda', { userAgent: 'Barracuda Sentinel (EE)' }, 'security_scanner'],
    ['Apple Mail Privacy Protection', { kind: 'open', userAgent: 'Mozilla/5.0' }, 'apple_privacy_proxy'],
  ];
  for (const [name, signals, reason] of strong) {
    test(`${name} alone makes a bot (${reason})`, () => {
      const d = judge(signals);
      assert.equal(d.is_bot, true);
      assert.ok(d.reasons.includes(reason as never), JSON.stringify(d));
      assert.ok(d.bot_score >= BOT_THRESHOLD && d.bot_score <= 1);
    });
  }

  test('weak signals alone stay human; together they cross the threshold', () => {
    const network = judge({ ip: '40.107.1.2' });
    assert.deepEqual(network, { is_bot: false, bot_score: WEIGHTS.scanner_network, reasons: ['scanner_network'] });
    const soon = judge({ secondsSinceSent: 45 });
    assert.deepEqual(soon, { is_bot: false, bot_score: WEIGHTS.soon_after_send, reasons: ['soon_after_send'] });
    const both = judge({ ip: '40.107.1.2', secondsSinceSent: 45 });
    assert.equal(both.is_bot, true);
    assert.equal(both.bot_score, Math.round((1 - (1 - WEIGHTS.scanner_network) * (1 - WEIGHTS.soon_after_send)) * 1000) / 1000);
    assert.deepEqual(both.reasons, ['scanner_network', 'soon_after_send']);
  });

  test('scores combine without exceeding 1; the honeypot is certain', () => {
    const d = judge({ kind: 'honeypot', method: 'HEAD', userAgent: 'curl/8.5.0', honeypotFollowed: true });
    assert.equal(d.bot_score, 1);
    const many = judge({ method: 'HEAD', userAgent: 'curl/8.5.0', secondsSinceSent: 1, otherLinksClickedRecently: 5 });
    assert.ok(many.bot_score <= 1 && many.bot_score > 0.99);
    assert.deepEqual(many.reasons.sort(), ['bot_user_agent', 'head_request', 'immediate_after_send', 'rapid_multi_click']);
  });

  test('more links in the burst weigh more', () => {
    assert.ok(judge({ otherLinksClickedRecently: 3 }).bot_score > judge({ otherLinksClickedRecently: 1 }).bot_score);
    assert.deepEqual(judge({ kind: 'open', otherLinksClickedRecently: 3 }).reasons, [], 'only clicks burst');
  });

  test('timing windows: opens 5 s, clicks 10 s, soon 60 s; unknown send time is no signal', () => {
    assert.deepEqual(judge({ kind: 'open', secondsSinceSent: 6 }).reasons, ['soon_after_send']);
    assert.deepEqual(judge({ secondsSinceSent: 10 }).reasons, ['immediate_after_send']);
    assert.deepEqual(judge({ secondsSinceSent: 61 }).reasons, []);
    assert.deepEqual(judge({ secondsSinceSent: null }).reasons, []);
    assert.deepEqual(judge({ kind: 'honeypot', secondsSinceSent: 0 }).reasons, ['honeypot'], 'timing is not scored for the honeypot');
  });

  test('Gmail and Yahoo image proxies are a person opening the message, not a bot', () => {
    const gmail = 'Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)';
    const yahoo = 'YahooMailProxy; https://help.yahoo.com/kb/yahoo-mail-proxy-SLN28749.html';
    for (const [ua, proxy] of [[gmail, 'google'], [yahoo, 'yahoo']] as const) {
      const c = classifyHit({ ...person, kind: 'open', userAgent: ua });
      assert.deepEqual(c.decision, { is_bot: false, bot_score: 0, reasons: [] });
      assert.equal(c.proxy, proxy);
      assert.equal(c.fingerprint, `${proxy}_image_proxy`);
      // A proxy does not click links: its UA on a click is a machine.
      assert.equal(judge({ userAgent: ua }).is_bot, true);
    }
  });

  test('Apple Mail Privacy Protection: bare Mozilla/5.0, or a detail-less UA from 17.0.0.0/8', () => {
    assert.equal(mailProxy('Mozilla/5.0', '198.51.100.1'), 'apple');
    assert.equal(mailProxy('Mozilla/5.0', '::ffff:17.58.1.1'), 'apple');
    assert.equal(mailProxy('AppleMail', '17.1.2.3'), 'apple');
    assert.equal(mailProxy(BROWSER_UA, '17.1.2.3'), null, 'a real browser on Apple’s network is a person');
    assert.equal(mailProxy(BROWSER_UA, '203.0.113.9'), null);
    const d = judge({ kind: 'open', userAgent: 'Mozilla/5.0' });
    assert.deepEqual(d.reasons, ['apple_privacy_proxy'], 'the specific reason replaces the generic isbot match');
  });

  test('security scanner fingerprints: user agents and gateway networks', () => {
    const cases: [string, string][] = [
      ['Mozilla/5.0 (compatible; Proofpoint URL Defense)', 'proofpoint'],
      ['Mimecast-URL-Protect/1.0', 'mimecast'],
      ['Barracuda Sentinel (EE)', 'barracuda'],
      ['Cisco IronPort Web Security', 'cisco_ironport'],
      ['Microsoft Office Existence Discovery', 'microsoft_defender'],
      ['ms-office; MSOffice 16', 'microsoft_defender'],
      ['Trend Micro Email Security', 'trend_micro'],
    ];
    for (const [ua, name] of cases) {
      assert.equal(scannerByUserAgent(ua), name, ua);
      const c = classifyHit({ ...person, userAgent: ua });
      assert.equal(c.decision.is_bot, true, ua);
      assert.ok(c.decision.reasons.includes('security_scanner'), ua);
      assert.equal(c.fingerprint, name);
    }
    assert.equal(scannerByUserAgent(BROWSER_UA), null);
    assert.equal(scannerByNetwork('148.163.130.5'), 'proofpoint');
    assert.equal(scannerByNetwork('::ffff:40.107.22.1'), 'microsoft_defender');
    assert.equal(scannerByNetwork('203.0.113.5'), null);
    assert.equal(scannerByNetwork('2001:db8::1'), null);
    assert.equal(scannerByNetwork('not an ip'), null);
    assert.equal(scannerByNetwork(null), null);
  });

  test('every reason has a weight in (0, 1] and strong signals alone cross the threshold', () => {
    for (const [reason, w] of Object.entries(WEIGHTS)) {
      assert.ok(w > 0 && w <= 1, reason);
      const weak = reason === 'scanner_network' || reason === 'soon_after_send';
      assert.equal(w >= BOT_THRESHOLD, !weak, reason);
    }
  });
});
