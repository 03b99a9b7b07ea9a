// The send path hands nodemailer its HTML and text parts already encoded
// (src/templates/mime-part.ts, in the render pool). The message must be byte for
// byte the one nodemailer composes from the strings: composed both ways here, for
// chosen edge cases and for generated texts of every kind and size.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import MailComposer from 'nodemailer/lib/mail-composer';
import { MAX_ENCODED_CHARS, mimePart, type MimePart } from '../../src/templates/mime-part.ts';
import { renderMessage as renderTask } from '../../src/templates/render-tasks.ts';
import { DEFAULT_RENDER_LIMITS } from '../../src/lib/render-limits.ts';

const FIXED = { from: 'a@example.com', to: 'b@example.com', subject: 'Hi', messageId: '<m@example.com>', date: new Date(0), baseBoundary: 'fixed' };

function compose(html: MimePart, text: MimePart): Promise<string> {
  return new Promise((resolve, reject) => {
    new MailComposer({ ...FIXED, html, text } as never).compile().build((err, message) => (err ? reject(err) : resolve(message.toString('latin1'))));
  });
}

async function same(html: string, text: string): Promise<{ raw: number }> {
  // As render-tasks.ts: encoded only when the message has both parts.
  const both = html !== '' && text !== '';
  const h = both ? mimePart('html', html) : html;
  const t = both ? mimePart('plain', text) : text;
  assert.equal(await compose(h, t), await compose(html, text), `html ${JSON.stringify(html.slice(0, 80))}…, text ${JSON.stringify(text.slice(0, 80))}…`);
  return { raw: (typeof h === 'object' ? 1 : 0) + (typeof t === 'object' ? 1 : 0) };
}

// A small seeded generator, so a failure can be replayed.
function rng(seed: number) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

const PIECES = [
  'word', 'Lorem ipsum dolor sit amet', ' ', '  ', '\t', ' \n', '\t\r\n', '\n', '\r\n', '\r', '=', '==3D', '.', '\n.\n', '..',
  'From me', '<a href="https://example.com/x?a=1&amp;b=2">link</a>', 'é', 'ñandú', 'Größe', 'Привет мир', '你好世界', '😀', '\u0001', '\u007f',
  'x'.repeat(120), '-'.repeat(80), ' '.repeat(90), '=?utf-8?Q?x?=',
];

function generated(next: () => number, length: number): string {
  let s = '';
  while (s.length < length) s += PIECES[Math.floor(next() * PIECES.length)];
  return s;
}

test('encoded parts compose to the very message nodemailer composes from the strings', async () => {
  const cases: [string, string][] = [
    ['', ''],
    ['<p>short</p>', 'short'],
    ['<p>Hello</p>\n<p>World</p>', 'Hello\nWorld\n'],
    [`<p>${'long line '.repeat(40)}</p>`, `${'long line '.repeat(40)}`],
    ['<p>trailing space \n</p>', 'trailing tab\t\nand space '],
    ['<p>Größe und Preis: 10 €</p>'.repeat(30), 'Größe: 10 €'],
    ['<p>Привет, как дела? Всё хорошо.</p>'.repeat(20), 'Привет'.repeat(50)],
    ['<p>你好世界</p>'.repeat(50), '你好'],
    ['a=b\r\nc=d\re=f\n', '.\n..\n.leading dot'],
    [`<html><body>${'<table><tr><td style="padding:12px">Story: what changed this week, in detail.</td></tr></table>\n'.repeat(2000)}</body></html>`, 'text'],
  ];
  let raw = 0;
  for (const [html, text] of cases) raw += (await same(html, text)).raw;
  // Long lines in Latin script go encoded (the long-line HTML and text, the German
  // HTML, the large table); short ASCII lines stay 7bit and Cyrillic or Chinese base64.
  assert.equal(raw, 4, 'encoded parts among the cases');
});

test('generated texts of every kind, from a few bytes to past the encoder\'s 64 KiB slices and the 128 KiB line check', async () => {
  let raw = 0;
  let runs = 0;
  for (const [seed, length] of [[1, 10], [2, 80], [3, 300], [4, 2_000], [5, 20_000], [6, 70_000], [7, 140_000]] as const) {
    const next = rng(seed);
    for (let i = 0; i < (length > 10_000 ? 3 : 25); i++) {
      raw += (await same(generated(next, length), generated(next, Math.ceil(length / 4)))).raw;
      runs++;
    }
  }
  assert.ok(raw > runs / 2, `${raw} encoded parts in ${runs} messages`);
});

test('a text past the cap is left to nodemailer, which streams it', () => {
  const long = `<p>${'Lorem ipsum dolor sit amet. '.repeat(10)}</p>\n`;
  const under = long.repeat(Math.floor(MAX_ENCODED_CHARS / long.length));
  const over = under + long;
  assert.equal(typeof mimePart('html', under), 'object');
  assert.equal(mimePart('html', over), over);
});

// Through the render task as the send path calls it (mime: true), then composed with
// the message's headers: the same bytes as the strings of mime: false, also when one
// part is empty (a lone raw part would become the message's root and lose its headers).
test('a rendered message with mime: true composes as the strings do, with one part empty too', async () => {
  const links = { publicUrl: 'https://plover.example.com', appSecret: '0123456789abcdef0123456789abcdef01234567' };
  const long = `<p>${'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(8)}</p>`;
  const cases = [
    { content: `<html><body>${long}<a href="https://example.com/a">a</a></body></html>`, alt_content: 'Hello, see https://example.com/a' },
    // Image-only HTML: the derived text is empty; the pixel makes a long line.
    { content: '<html><body><img src="https://cdn.example.com/banner.png" alt=""></body></html>', alt_content: '' },
    // alt_content that renders empty.
    { content: `<html><body>${long}</body></html>`, alt_content: '{{ nothing }}' },
  ];
  let raw = 0;
  for (const template of cases) {
    const input = {
      sendLogId: '01a2b3c4-0000-7000-8000-000000000001', contact: { email: 'ann@example.com' }, template: { subject: 'Hi {{ contact.email }}', ...template },
      sendData: {}, event: null, campaign: null, links, limits: DEFAULT_RENDER_LIMITS,
    };
    const strings = renderTask(input);
    const parts = renderTask({ ...input, mime: true });
    assert.ok(strings.ok && parts.ok);
    if (typeof parts.html === 'object') raw++;
    const full = (r: typeof parts & { ok: true }) => ({ ...FIXED, subject: r.subject, html: r.html, text: r.text });
    const compose2 = (o: object) => new Promise<string>((resolve, reject) => {
      new MailComposer(o as never).compile().build((err, m) => (err ? reject(err) : resolve(m.toString('latin1'))));
    });
    const a = await compose2(full(parts));
    assert.equal(a, await compose2(full(strings)));
    assert.match(a, /^Subject: Hi ann@example\.com$/m, 'the message keeps its headers');
  }
  assert.equal(raw, 1, 'only the message with both parts is sent pre-encoded');
});
