// SMTP sink for bench/campaigns.ts: an smtp-server on 127.0.0.1 that accepts
// every message and records, per message, its Message-ID and when its DATA
// ended (Date.now(), the moment before the 250 reply). The parent maps the
// Message-ID (<email_send_log id@domain>) back to the triggering event. A small
// HTTP side (Fastify, as every bench server) serves the SMTP port, the count and
// the arrivals, and clears them.
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { SMTPServer } from 'smtp-server';
import { serve } from '../lib/serve.ts';

export type Arrival = [messageId: string, at: number];

const MESSAGE_ID = /^message-id:[ \t]*<([^>\r\n]+)>/im;
const DKIM_SIGNATURE = /^dkim-signature:/gim;

await serve(async () => {
  let arrivals: Arrival[] = [];
  // DKIM-Signature header fields seen (campaigns --dkim checks that every message was signed).
  let signatures = 0;
  const smtp = new SMTPServer({
    secure: false,
    // Plain and unauthenticated, as nodemailer to a local relay without
    // credentials: the bench measures the sending path, not TLS.
    disabledCommands: ['STARTTLS', 'AUTH'],
    authOptional: true,
    logger: false,
    closeTimeout: 1_000,
    onData(stream, _session, callback) {
      // Only the header block is kept: the Message-ID is all we need, and
      // buffering whole bodies would make the sink slower than what it measures.
      let head = '';
      let complete = false;
      stream.on('data', (chunk: Buffer) => {
        if (complete) return;
        head += chunk.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end !== -1) {
          head = head.slice(0, end);
          complete = true;
        }
      });
      stream.on('end', () => {
        const id = MESSAGE_ID.exec(head.replace(/\r\n[ \t]+/g, ' '))?.[1] ?? '';
        signatures += head.match(DKIM_SIGNATURE)?.length ?? 0;
        arrivals.push([id, Date.now()]);
        callback();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    smtp.once('error', reject);
    smtp.listen(0, '127.0.0.1', () => resolve());
  });
  const smtpPort = (smtp.server.address() as AddressInfo).port;

  const app = Fastify();
  app.get('/smtp', async () => ({ port: smtpPort }));
  app.get('/count', async () => ({ count: arrivals.length, signatures }));
  app.get('/arrivals', async () => arrivals);
  app.post('/reset', async () => {
    arrivals = [];
    signatures = 0;
    return { ok: true };
  });
  return {
    app,
    close: () => new Promise<void>((resolve) => smtp.close(() => resolve())),
  };
});
