// An SMTP server on 127.0.0.1 for the fault tests that counts messages per
// Message-ID (the engine's is <email_send_log id@domain>), can hold each DATA
// answer for a while (so a kill lands mid-transaction), and can go down and come
// back on the same port: down means the port is closed (connection refused).
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export type FaultSmtp = {
  port: number;
  /** Messages accepted, by Message-ID without the angle brackets. */
  counts: Map<string, number>;
  total(): number;
  /** Messages whose DATA has been received (answered or not yet). */
  started(): number;
  /** Stops listening: new connections are refused, open ones are cut. */
  down(): Promise<void>;
  /** Listens again on the same port. */
  up(): Promise<void>;
  close(): Promise<void>;
};

function messageIdOf(raw: string): string {
  const m = /^message-id:\s*<([^>]+)>/im.exec(raw.slice(0, raw.indexOf('\r\n\r\n') + 2));
  return m?.[1] ?? '(none)';
}

export async function startFaultSmtp(opts: { dataDelayMs?: number } = {}): Promise<FaultSmtp> {
  const counts = new Map<string, number>();
  let total = 0;
  let started = 0;
  const make = () =>
    new SMTPServer({
      secure: false,
      disabledCommands: ['STARTTLS'],
      authOptional: true,
      logger: false,
      closeTimeout: 100,
      onData(stream, _session, callback) {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          started++;
          const accept = () => {
            const id = messageIdOf(Buffer.concat(chunks).toString('utf8'));
            counts.set(id, (counts.get(id) ?? 0) + 1);
            total++;
            callback();
          };
          if (opts.dataDelayMs) setTimeout(accept, opts.dataDelayMs);
          else accept();
        });
      },
    });
  let server = make();
  // A client killed mid-session (kill -9 of a worker) resets its connection:
  // expected here, and an 'error' without a listener would throw.
  server.on('error', () => {});
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
  await listen(0);
  const port = (server.server.address() as AddressInfo).port;
  let listening = true;
  const stop = async () => {
    if (!listening) return;
    listening = false;
    // smtp-server waits for clients to leave; a pooled nodemailer connection
    // would keep it open, so cut the sockets too.
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    (server as unknown as { connections: Set<{ close(): void }> }).connections?.forEach((c) => c.close());
    await closed;
  };
  return {
    port,
    counts,
    total: () => total,
    started: () => started,
    down: stop,
    async up() {
      if (listening) return;
      server = make();
      server.on('error', () => {});
      await listen(port);
      listening = true;
    },
    close: stop,
  };
}
