// STARTTLS on the inbound listener with the operator's certificate
// (INBOUND_TLS_CERT/KEY): offered in EHLO only when configured, a DSN delivered
// over TLS is recorded, and a renewed certificate is taken without a restart.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';
import nodemailer from 'nodemailer';
import pino from 'pino';
import { generate } from 'selfsigned';
import { closeTransports } from '../../src/mail/send.ts';
import { startInboundListener, type InboundListener } from '../../src/inbound/listener.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { drain, setup } from '../engine/fixtures.ts';
import { startCaptureSink, type CaptureSink } from '../engine/sink.ts';

const DOMAIN = 'bounces.plover.test';
const quiet = pino({ level: process.env.TLS_LOG ?? 'silent' });

async function certificate(): Promise<{ cert: string; key: string }> {
  const pems = await generate([{ name: 'commonName', value: DOMAIN }], {
    keySize: 2048, notBeforeDate: new Date(Date.now() - 3_600_000), notAfterDate: new Date(Date.now() + 86_400_000),
    extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: DOMAIN }] }],
  });
  return { cert: pems.cert, key: pems.private };
}

/** EHLO over a plain connection, then (if asked) STARTTLS: the capabilities and the certificate the listener showed. */
async function probe(port: number, ca?: string): Promise<{ ehlo: string[]; fingerprint?: string }> {
  const socket = net.connect(port, '127.0.0.1');
  let buffer = '';
  const waiters: (() => void)[] = [];
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => {
    buffer += d;
    waiters.splice(0).forEach((w) => w());
  });
  // Reads one complete reply (its last line is "NNN text").
  const reply = async (): Promise<string[]> => {
    for (;;) {
      const lines = buffer.split('\r\n');
      const end = lines.findIndex((l) => /^\d{3} /.test(l));
      if (end >= 0) {
        buffer = lines.slice(end + 1).join('\r\n');
        return lines.slice(0, end + 1);
      }
      await new Promise<void>((r) => waiters.push(r));
    }
  };
  try {
    await reply();
    socket.write('EHLO probe.test\r\n');
    const ehlo = (await reply()).map((l) => l.slice(4));
    if (!ca) return { ehlo };
    socket.write('STARTTLS\r\n');
    assert.match((await reply())[0]!, /^220/);
    socket.removeAllListeners('data');
    const secure = tls.connect({ socket, servername: DOMAIN, ca: [ca] });
    await new Promise<void>((resolve, reject) => secure.once('secureConnect', resolve).once('error', reject));
    const fingerprint = secure.getPeerCertificate().fingerprint256;
    secure.destroy();
    return { ehlo, fingerprint };
  } finally {
    socket.destroy();
  }
}

describe('inbound listener: STARTTLS', () => {
  let t: TestApp;
  let sink: CaptureSink;
  let dir: string;
  let first: { cert: string; key: string };
  let listener: InboundListener;
  let plain: InboundListener;
  let certFile: string;
  let keyFile: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'plover-inbound-tls-'));
    certFile = join(dir, 'cert.pem');
    keyFile = join(dir, 'key.pem');
    first = await certificate();
    writeFileSync(certFile, first.cert);
    writeFileSync(keyFile, first.key);
    const base = testConfig({ allowedPrivateTargets: ['127.0.0.1'] });
    const inbound = { ...base.inbound, domain: DOMAIN, smtpPort: 0, smtpHost: '127.0.0.1' };
    const config = testConfig({ allowedPrivateTargets: ['127.0.0.1'], inbound: { ...inbound, tlsCertFile: certFile, tlsKeyFile: keyFile } });
    t = await buildTestApp({ config });
    sink = await startCaptureSink();
    listener = await startInboundListener({ db: t.database.db, config, log: quiet });
    plain = await startInboundListener({ db: t.database.db, config: testConfig({ inbound }), log: quiet });
  });
  after(async () => {
    await listener.close();
    await plain.close();
    closeTransports();
    await sink.close();
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('STARTTLS is offered only with a certificate of our own; a DSN over TLS is recorded', async () => {
    assert.ok((await probe(listener.port)).ehlo.includes('STARTTLS'));
    assert.ok(!(await probe(plain.port)).ehlo.includes('STARTTLS'), "never smtp-server's built-in certificate");
    const { fingerprint } = await probe(listener.port, first.cert);
    assert.equal(fingerprint, new X509Certificate(first.cert).fingerprint256);

    const s = await setup(t, sink.port);
    await t.database.db.updateTable('mail_accounts').set({ verp: true }).where('id', '=', s.accountId).execute();
    const res = await s.a.post('/email/emails/submit', { template_id: s.templateId, mail_account_id: s.accountId, to_email: 'gone-tls@example.com' });
    assert.equal(res.statusCode, 202, res.body);
    const id = res.json().email.id as string;
    await drain(t, { config: t.app.deps.config });
    const at = sink.messages.find((m) => m.to.includes('gone-tls@example.com'))!;
    const row = await t.database.db.selectFrom('email_send_log').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    const dsn = readFileSync(new URL('../fixtures/inbound/postfix-hard-5.1.1.eml', import.meta.url), 'latin1').replaceAll('@@MESSAGE_ID@@', row.message_id!);
    // requireTLS: the message goes only after a successful STARTTLS with this certificate.
    const client = nodemailer.createTransport({ host: '127.0.0.1', port: listener.port, secure: false, requireTLS: true, tls: { ca: [first.cert], servername: DOMAIN } });
    try {
      const info = await client.sendMail({ envelope: { from: '', to: at.from }, raw: dsn });
      assert.match(String(info.response), /^250/);
    } finally {
      client.close();
    }
    const after = await t.database.db.selectFrom('email_send_log').select('status').where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(after.status, 'bounced_hard');
  });

  test('a renewed certificate is taken without a restart; a broken one keeps the previous', async () => {
    const renewed = await certificate();
    writeFileSync(certFile, renewed.cert);
    writeFileSync(keyFile, renewed.key);
    const later = new Date(Date.now() + 60_000);
    utimesSync(certFile, later, later);
    listener.reloadTls();
    assert.equal((await probe(listener.port, renewed.cert)).fingerprint, new X509Certificate(renewed.cert).fingerprint256);

    writeFileSync(keyFile, 'not a key');
    const later2 = new Date(Date.now() + 120_000);
    utimesSync(keyFile, later2, later2);
    listener.reloadTls();
    assert.equal((await probe(listener.port, renewed.cert)).fingerprint, new X509Certificate(renewed.cert).fingerprint256);
  });
});
