// `npm run bench -- dkim-sign [--dkim-messages <n>]`
//
// What DKIM signing costs the send path, without the database and the SMTP
// server: nodemailer composes the campaign benchmark's message (personalised
// subject, ~1.5 KB of HTML with links, a text part, List-Unsubscribe headers)
// into a buffer (its stream transport), with the send task's signing plugin
// (src/mail/dkim-sign.ts) installed, for no key, an RSA 2048 key, an Ed25519 key
// and both. The modes run interleaved, several rounds each, and each mode's
// median round counts, so a busy machine slows them alike. Reported: messages/s
// by wall time and per CPU second of this process, and the CPU time signing
// adds per message. One message of each mode is verified by mailauth against
// the public keys first, so the bench measures real signatures.
//
// The end-to-end figure (engine from committed events to an SMTP sink, with the
// database) is `npm run bench -- campaigns --dkim none|rsa|ed25519|both`.
import { performance } from 'node:perf_hooks';
import { dkimVerify } from 'mailauth';
import nodemailer from 'nodemailer';
import { generateDkimKeyPair, type DkimAlgorithm, type SignatureData } from '../src/mail/dkim.ts';
import { DKIM_OPTION, installDkimSigner, type DkimOption } from '../src/mail/dkim-sign.ts';
import { fmt, table } from './lib/report.ts';
import type { BenchOptions } from './lib/types.ts';

const DEFAULT_MESSAGES = 3_000;
const ROUNDS = 3;
const IN_FLIGHT = 8; // the worker's concurrency: sends of a batch go out together
const DOMAIN = 'bench.test';

const HTML = `<!doctype html><html><body style="font-family:sans-serif">
<h1>Hello reader</h1>
<p>Thanks for joining the welcome campaign. Here is what happens next, in three short steps.</p>
<ol><li>Read <a href="https://plover.bench.test/t/c/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">the guide</a>.</li>
<li>Set up <a href="https://plover.bench.test/t/c/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb">your settings</a>.</li>
<li>Say hello on <a href="https://plover.bench.test/t/c/cccccccccccccccccccccccccccccccccccccccccccc">the forum</a>.</li></ol>
<p>${'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(12)}</p>
<p style="font-size:12px"><a href="https://plover.bench.test/u/dddddddddddddddddddddddddddddddd">Unsubscribe</a></p>
</body></html>`;

type Mode = { name: string; algorithms: DkimAlgorithm[] };
const MODES: Mode[] = [
  { name: 'none', algorithms: [] },
  { name: 'rsa', algorithms: ['rsa'] },
  { name: 'ed25519', algorithms: ['ed25519'] },
  { name: 'both', algorithms: ['rsa', 'ed25519'] },
];

function message(i: number, signatures: SignatureData[]) {
  const dkim: DkimOption = { signatures };
  return {
    from: { name: 'Bench News', address: `news@${DOMAIN}` },
    to: `reader${i}@example.com`,
    subject: `Welcome, reader${i}: your campaign starts now`,
    html: HTML,
    text: `Hello reader${i}, thanks for joining: https://example.com/guide`,
    messageId: `<0190d000-0000-7000-8000-${String(i).padStart(12, '0')}@${DOMAIN}>`,
    headers: {
      'List-Unsubscribe': { prepared: true, value: '<https://plover.bench.test/u/dddddddddddddddddddddddddddddddd>' },
      'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
    },
    [DKIM_OPTION]: dkim,
  };
}

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags['dkim-messages'] ?? DEFAULT_MESSAGES;
  const transport = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'windows' });
  installDkimSigner(transport);
  opts.defer(() => transport.close());

  const keys = new Map<DkimAlgorithm, { pem: string; record: string }>();
  for (const algorithm of ['rsa', 'ed25519'] as const) {
    const pair = await generateDkimKeyPair(algorithm);
    keys.set(algorithm, { pem: pair.privateKeyPem, record: `v=DKIM1; k=${algorithm}; p=${pair.publicKey}` });
  }
  const signaturesOf = (mode: Mode): SignatureData[] =>
    mode.algorithms.map((a) => ({ signingDomain: DOMAIN, selector: a, privateKey: keys.get(a)!.pem, algorithm: `${a}-sha256` }));
  const resolver = async (name: string) => {
    const k = keys.get(name.split('.')[0] as DkimAlgorithm);
    if (!k) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    return [[k.record]];
  };

  // Real signatures, checked by an independent verifier.
  for (const mode of MODES) {
    const info = await transport.sendMail(message(0, signaturesOf(mode)) as never);
    const { results } = await dkimVerify(info.message as unknown as Buffer, { resolver: resolver as never });
    const passed = results.filter((r) => r.status.result === 'pass').length;
    if (passed !== mode.algorithms.length) throw new Error(`${mode.name}: ${passed} signatures verified, expected ${mode.algorithms.length}`);
  }
  const bytes = ((await transport.sendMail(message(0, []) as never)).message as unknown as Buffer).length;

  const once = async (mode: Mode, count: number) => {
    const signatures = signaturesOf(mode);
    let next = 0;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (next < count) await transport.sendMail(message(next++, signatures) as never);
      }),
    );
    const wall = (performance.now() - t0) / 1000;
    const c = process.cpuUsage(cpu0);
    return { wall, cpu: (c.user + c.system) / 1e6 };
  };

  opts.log(`dkim-sign: warm-up`);
  for (const mode of MODES) await once(mode, Math.min(300, n));
  const rounds = new Map<string, { wall: number; cpu: number }[]>(MODES.map((m) => [m.name, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const mode of MODES) {
      opts.log(`dkim-sign: round ${r + 1}/${ROUNDS}, ${mode.name}: ${fmt(n, 0)} messages`);
      rounds.get(mode.name)!.push(await once(mode, n));
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const result = new Map(MODES.map((m) => {
    const rs = rounds.get(m.name)!;
    return [m.name, { wall: median(rs.map((x) => x.wall)), cpu: median(rs.map((x) => x.cpu)) }];
  }));
  const base = result.get('none')!;
  console.log(`\ndkim-sign: ${fmt(n, 0)} messages of ${fmt(bytes, 0)} bytes per mode, composed by nodemailer into memory, ` +
    `${IN_FLIGHT} in flight; median of ${ROUNDS} interleaved rounds`);
  console.log(
    table(
      ['signatures', 'e-mails/s (wall)', 'e-mails per CPU s', 'CPU µs/e-mail', 'added by signing µs/e-mail', 'ratio to none (CPU)'],
      MODES.map((m) => {
        const r = result.get(m.name)!;
        return [
          m.name, fmt(n / r.wall, 0), fmt(n / r.cpu, 0), fmt((r.cpu / n) * 1e6, 0),
          m.name === 'none' ? '—' : fmt(((r.cpu - base.cpu) / n) * 1e6, 0), fmt(base.cpu / r.cpu, 2),
        ];
      }),
      ['left', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
}
