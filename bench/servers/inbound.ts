// Server for bench/inbound.ts: the inbound SMTP listener on 127.0.0.1 with its
// own database connection pool and untrusted pool (mode `listener`), or, as
// the same-run baseline, a bare smtp-server with the same options that accepts
// every recipient and discards every message (mode `baseline`). A small HTTP
// side (Fastify, as every bench server) tells the parent the SMTP port.
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import pino from 'pino';
import { SMTPServer } from 'smtp-server';
import { loadConfig } from '../../src/config.ts';
import { createDb, createPool } from '../../src/db/pool.ts';
import { startInboundListener } from '../../src/inbound/listener.ts';
import { UntrustedPool } from '../../src/untrusted/pool.ts';
import { serve } from '../lib/serve.ts';

type Params = { mode: 'listener' | 'baseline'; databaseUrl: string; appSecret: string; domain: string; niceIncrement?: number };

await serve<Params>(async (p) => {
  let smtpPort: number;
  let close: () => Promise<void>;
  if (p.mode === 'listener') {
    const config = loadConfig({
      DATABASE_URL: p.databaseUrl, APP_SECRET: p.appSecret, LOG_LEVEL: 'silent',
      INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1', INBOUND_DOMAIN: p.domain, INBOUND_MAX_CLIENTS: '1000',
    });
    const pool = createPool(p.databaseUrl, 10);
    const db = createDb(pool);
    const untrusted = new UntrustedPool({ niceIncrement: p.niceIncrement ?? 10 });
    const listener = await startInboundListener({ db, config, log: pino({ level: 'warn' }, pino.destination(2)), pool: untrusted });
    smtpPort = listener.port;
    close = async () => {
      await listener.close();
      await untrusted.close();
      await db.destroy();
    };
  } else {
    const smtp = new SMTPServer({
      secure: false, disabledCommands: ['AUTH', 'STARTTLS'], authOptional: true, logger: false, size: 10 * 1024 * 1024, disableReverseLookup: true,
      maxClients: 1000, closeTimeout: 1_000,
      onData(stream, _session, callback) {
        stream.on('data', () => {});
        stream.on('end', () => callback());
      },
    });
    await new Promise<void>((resolve, reject) => {
      smtp.once('error', reject);
      smtp.listen(0, '127.0.0.1', () => resolve());
    });
    smtpPort = (smtp.server.address() as AddressInfo).port;
    close = () => new Promise<void>((resolve) => smtp.close(() => resolve()));
  }
  const app = Fastify();
  app.get('/smtp', async () => ({ port: smtpPort }));
  return { app, close };
});
