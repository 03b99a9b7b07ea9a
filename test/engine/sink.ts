// A capturing SMTP server on 127.0.0.1 (smtp-server) for the engine tests, and
// a small MIME reader for what nodemailer sends. Recipients decide the answer:
// `hard…@` is refused with 550 at RCPT TO, `soft…@` with 451; everyone else is
// accepted with 250.
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export type Received = { from: string; to: string[]; raw: string; user: string | undefined; /** Date.now() at its end of data */ at: number };

export type CaptureSink = {
  port: number;
  messages: Received[];
  rcptAttempts: string[];
  /** Each RCPT TO with its Date.now(). */
  rcptLog: { address: string; at: number }[];
  /** Resolves when `n` messages have arrived. */
  waitFor(n: number, timeoutMs?: number): Promise<Received[]>;
  close(): Promise<void>;
};

export async function startCaptureSink(): Promise<CaptureSink> {
  const messages: Received[] = [];
  const rcptAttempts: string[] = [];
  const rcptLog: { address: string; at: number }[] = [];
  const waiters: (() => void)[] = [];
  const server = new SMTPServer({
    secure: false,
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    authOptional: true,
    logger: false,
    closeTimeout: 100,
    // No reverse lookup of 127.0.0.1 before the greeting (up to 1.5 s where /etc/hosts lacks it).
    disableReverseLookup: true,
    onAuth(auth, _session, callback) {
      callback(null, { user: auth.username });
    },
    onRcptTo(address, _session, callback) {
      rcptAttempts.push(address.address);
      rcptLog.push({ address: address.address, at: Date.now() });
      if (address.address.startsWith('hard')) return callback(Object.assign(new Error('5.1.1 No such user'), { responseCode: 550 }));
      if (address.address.startsWith('soft')) return callback(Object.assign(new Error('4.2.2 Mailbox full, try later'), { responseCode: 451 }));
      callback();
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        messages.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
          user: session.user as string | undefined,
          at: Date.now(),
        });
        waiters.splice(0).forEach((w) => w());
        callback();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.server.address() as AddressInfo;
  return {
    port,
    messages,
    rcptAttempts,
    rcptLog,
    async waitFor(n, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (messages.length < n) {
        if (Date.now() > deadline) throw new Error(`expected ${n} messages, got ${messages.length}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 200);
        });
      }
      return messages;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function decodeQp(s: string): string {
  const bytes: number[] = [];
  const text = s.replace(/=\r?\n/g, '');
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '=' && /^[0-9A-F]{2}$/i.test(text.slice(i + 1, i + 3))) {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(...Buffer.from(text[i], 'utf8'));
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

export type Parsed = { headers: Map<string, string>; html: string; text: string };

function splitPart(part: string): { headers: Map<string, string>; body: string } {
  const at = part.indexOf('\r\n\r\n');
  const head = part.slice(0, at).replace(/\r\n[ \t]+/g, ' ');
  const headers = new Map<string, string>();
  for (const line of head.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) headers.set(line.slice(0, i).toLowerCase(), line.slice(i + 1).trim());
  }
  return { headers, body: part.slice(at + 4) };
}

function decodeBody(headers: Map<string, string>, body: string): string {
  const enc = (headers.get('content-transfer-encoding') ?? '').toLowerCase();
  if (enc === 'quoted-printable') return decodeQp(body);
  if (enc === 'base64') return Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
  return body;
}

/** Headers (unfolded, lower-case names) and the text and HTML parts of a multipart/alternative message. */
export function parseMessage(raw: string): Parsed {
  const { headers, body } = splitPart(raw);
  const boundary = /boundary="?([^";]+)"?/i.exec(headers.get('content-type') ?? '')?.[1];
  let html = '';
  let text = '';
  const parts = boundary ? body.split(`--${boundary}`).slice(1, -1) : [raw];
  for (const p of parts) {
    const part = splitPart(p.replace(/^\r\n/, ''));
    const type = part.headers.get('content-type') ?? '';
    const decoded = decodeBody(part.headers, part.body.replace(/\r\n$/, ''));
    if (type.startsWith('text/html')) html = decoded;
    else if (type.startsWith('text/plain')) text = decoded;
  }
  return { headers, html, text };
}

/** `=?UTF-8?Q?…?=` / `=?UTF-8?B?…?=` words of a header, decoded. */
export function decodeHeader(value: string): string {
  return value.replace(/=\?utf-8\?([QB])\?([^?]*)\?=\s*/gi, (_, enc: string, data: string) =>
    enc.toUpperCase() === 'B' ? Buffer.from(data, 'base64').toString('utf8') : decodeQp(data.replace(/_/g, ' ')),
  );
}
