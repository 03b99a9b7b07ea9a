// Real DSN and ARF messages (test/fixtures/inbound, see its README) classified:
// hard or soft by the RFC 3463 class, complaints from ARF and JMRP, warnings
// and non-complaint reports left alone; replies matched by In-Reply-To; the
// parser's caps on MIME parts and depth.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { classifyMessage, type AddressHint, type Classified } from '../../src/inbound/parse.ts';
import type { Feedback } from '../../src/inbound/feedback.ts';

const OURS = '0192f6c2-8d1e-7c3a-9b2f-1a2b3c4d5e6f@mail.example.com';
const fixture = (name: string) =>
  Buffer.from(readFileSync(new URL(`../fixtures/inbound/${name}`, import.meta.url), 'latin1').replaceAll('@@MESSAGE_ID@@', OURS), 'latin1');

function one(r: Classified): Feedback {
  assert.ok(Array.isArray(r), `expected feedback, got ${JSON.stringify(r)}`);
  assert.equal(r.length, 1);
  return r[0]!;
}

const CASES: [string, Feedback['kind'], string | null, AddressHint?][] = [
  ['postfix-hard-5.1.1.eml', 'bounce_hard', '5.1.1'],
  ['postfix-soft-4.4.1.eml', 'bounce_soft', '4.4.1'],
  ['exim-dsn-5.0.0.eml', 'bounce_hard', '5.0.0'],
  ['exim-plain.eml', 'bounce_hard', '5.7.0'],
  ['exchange2007-5.1.1.eml', 'bounce_hard', '5.1.1'],
  ['office365-5.1.10.eml', 'bounce_hard', '5.1.10'],
  ['office365-5.2.2.eml', 'bounce_hard', '5.2.2'],
  ['outlook-failed-4.4.7.eml', 'bounce_soft', '4.4.7'],
  ['gmail-plain.eml', 'bounce_hard', '5.1.1'],
  ['yahoo-plain.eml', 'bounce_hard', '5.1.1'],
  ['yahooinc-dsn-5.7.9.eml', 'bounce_hard', '5.7.9'],
  ['arf-abuse.eml', 'complaint', null],
  ['arf-yahoo.eml', 'complaint', null],
  ['arf-returnpath.eml', 'complaint', null],
  ['jmrp-hotmail.eml', 'complaint', null, { type: 'fbl' }],
];

for (const [file, kind, status, hint] of CASES) {
  test(`${file}: ${kind}${status ? ` ${status}` : ''}, matched by the original Message-ID`, async () => {
    const f = one(await classifyMessage(fixture(file), hint));
    assert.equal(f.kind, kind);
    assert.equal(f.smtp_message_id, OURS);
    if (status) assert.equal(f.status_code, status);
    if (kind === 'complaint') assert.equal(f.feedback_type, 'abuse');
    else if (!['exim-dsn-5.0.0.eml', 'outlook-failed-4.4.7.eml'].includes(file)) assert.ok(f.diagnostic, 'a bounce carries what the server said');
  });
}

test('a delay warning and an auth-failure report are not feedback', async () => {
  const delayed = await classifyMessage(fixture('outlook-delayed-4.4.7.eml'));
  assert.ok(!Array.isArray(delayed) && /delayed/.test(delayed.reason));
  const auth = await classifyMessage(fixture('arf-auth-failure.eml'));
  assert.ok(!Array.isArray(auth) && /auth-failure/.test(auth.reason));
});

test('a signed return path names the message even when the DSN quotes no original', async () => {
  const raw = fixture('exim-dsn-5.0.0.eml').toString('latin1').replace(/Message-Id: <[^>]*>/gi, 'Message-Id: <other@example.net>');
  const f = one(await classifyMessage(Buffer.from(raw, 'latin1'), { type: 'bounce', message_id: '0192f6c2-0000-7000-8000-000000000001' }));
  assert.equal(f.kind, 'bounce_hard');
  assert.equal(f.message_id, '0192f6c2-0000-7000-8000-000000000001');
  // Without the address and without our Message-ID: nothing to match.
  const none = await classifyMessage(Buffer.from(raw, 'latin1'));
  assert.ok(!Array.isArray(none));
});

const reply = (extra: string) =>
  `From: Jane Doe <jane@example.com>\r\nTo: news@shop.example\r\nSubject: Re: Spring picks\r\nDate: Tue, 24 Nov 2026 10:00:00 +0000\r\n` +
  `Message-ID: <reply-1@example.com>\r\n${extra}Content-Type: text/plain; charset=utf-8\r\n\r\nDo you ship to Canada?\r\n\r\n> quoted\r\n`;

test('a reply is matched by In-Reply-To and carries its text; an auto-reply is not a reply', async () => {
  const f = one(await classifyMessage(reply(`In-Reply-To: <${OURS}>\r\nReferences: <older@example.com> <${OURS}>\r\n`)));
  assert.equal(f.kind, 'reply');
  assert.equal(f.smtp_message_id, OURS);
  assert.equal(f.reply?.subject, 'Re: Spring picks');
  assert.match(f.reply?.text ?? '', /Do you ship to Canada\?/);
  assert.equal(f.reply?.message_id, 'reply-1@example.com');
  assert.match(f.reply?.from ?? '', /jane@example.com/);
  const auto = await classifyMessage(reply(`In-Reply-To: <${OURS}>\r\nAuto-Submitted: auto-replied\r\n`));
  assert.ok(!Array.isArray(auto) && /automatic/.test(auto.reason));
  const stranger = await classifyMessage(reply('In-Reply-To: <someone-else@example.com>\r\n'));
  assert.ok(!Array.isArray(stranger));
  // Sent to a signed reply address: matched by it, whatever its headers say.
  const byAddress = one(await classifyMessage(reply(''), { type: 'reply', message_id: '0192f6c2-0000-7000-8000-000000000002' }));
  assert.equal(byAddress.message_id, '0192f6c2-0000-7000-8000-000000000002');
});

test('MIME parts and nesting depth are capped: such a message is dropped unread', async () => {
  const nest = (depth: number): string => {
    let body = 'Content-Type: text/plain\r\n\r\nhi\r\n';
    for (let i = 0; i < depth; i++) body = `Content-Type: multipart/mixed; boundary="b${i}"\r\n\r\n--b${i}\r\n${body}--b${i}--\r\n`;
    return `From: a@example.com\r\nSubject: deep\r\nMIME-Version: 1.0\r\n${body}`;
  };
  const deep = await classifyMessage(nest(30), undefined, { maxParts: 100, maxDepth: 10 });
  assert.ok(!Array.isArray(deep) && /nesting/i.test(deep.reason), JSON.stringify(deep));
  const shallow = await classifyMessage(nest(5), undefined, { maxParts: 100, maxDepth: 10 });
  assert.ok(!Array.isArray(shallow) && /neither a report nor a reply/.test(shallow.reason));
  const parts = Array.from({ length: 50 }, () => '--p\r\nContent-Type: text/plain\r\n\r\nx\r\n').join('');
  const many = await classifyMessage(`From: a@example.com\r\nContent-Type: multipart/mixed; boundary="p"\r\n\r\n${parts}--p--\r\n`, undefined, { maxParts: 20, maxDepth: 10 });
  assert.ok(!Array.isArray(many) && /child nodes|parts/i.test(many.reason), JSON.stringify(many));
});
