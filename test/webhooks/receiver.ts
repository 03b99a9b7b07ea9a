// A real HTTP receiver on 127.0.0.1 for webhook tests: records every request
// (raw body bytes, headers, arrival time) and answers as the test says.
import { createHmac } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export type Received = { at: number; method: string; path: string; headers: IncomingHttpHeaders; raw: Buffer; body: Record<string, any> };
export type Responder = (req: Received, res: ServerResponse) => void;

export type Receiver = {
  url: string;
  port: number;
  received: Received[];
  respond: (fn: Responder) => void;
  waitFor: (n: number, timeoutMs?: number) => Promise<Received[]>;
  close: () => Promise<void>;
};

export const ok: Responder = (_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end('{"received":true}');
};

export async function startReceiver(responder: Responder = ok): Promise<Receiver> {
  let respond = responder;
  const received: Received[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      let body: Record<string, any> = {};
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        // recorded as received; the test decides whether that is a failure
      }
      const r: Received = { at: Date.now(), method: req.method ?? '', path: req.url ?? '', headers: req.headers, raw, body };
      received.push(r);
      for (const w of waiters.filter((w) => received.length >= w.n)) w.resolve();
      respond(r, res);
    });
  });
  server.keepAliveTimeout = 1_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    port,
    received,
    respond: (fn) => {
      respond = fn;
    },
    waitFor: (n, timeoutMs = 15_000) =>
      new Promise((resolve, reject) => {
        if (received.length >= n) return resolve(received);
        const timer = setTimeout(() => reject(new Error(`receiver got ${received.length} of ${n} requests in ${timeoutMs} ms`)), timeoutMs);
        waiters.push({ n, resolve: () => (clearTimeout(timer), resolve(received)) });
      }),
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** An independent check of X-FY-Signature: recompute over the raw bytes received. */
export function verifyFy(r: Received, secret: string): boolean {
  const header = String(r.headers['x-fy-signature']);
  const parts = Object.fromEntries(header.split(',').map((p) => p.trim().split('=') as [string, string]));
  const expected = createHmac('sha256', secret).update(Buffer.concat([Buffer.from(`${parts.t}.`), r.raw])).digest('hex');
  return parts.v1 === expected;
}

/** Retries an assertion block until it passes (results are recorded in batches, a few ms after the receiver answers). */
export async function eventually(check: () => Promise<void>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(50);
    }
  }
}
