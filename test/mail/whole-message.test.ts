// The composed message is written to the SMTP socket in one piece
// (src/mail/whole-message.ts): the same message arrives, in a few writes rather
// than one per composed chunk, and DKIM signatures made before it still verify.
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { dkimVerify } from 'mailauth';
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import { SMTPServer } from 'smtp-server';
import { DKIM_OPTION, installDkimSigner } from '../../src/mail/dkim-sign.ts';
import { HOLD_OPTION, installWholeMessage, wholeMessage } from '../../src/mail/whole-message.ts';
import { watchSocketWrites } from '../lib/socket-writes.ts';

const HTML = `<html><body><h1>Hello Ann</h1>${'<p>Some text with a <a href="https://example.com/t/abc">link</a>, and more.</p>\n'.repeat(40)}</body></html>`;
const TEXT = `Hello Ann\n${'Some plain text, and a line or two. '.repeat(60)}`;

describe('one write per message', () => {
  let server: SMTPServer;
  let port: number;
  const received: Buffer[] = [];
  before(async () => {
    server = new SMTPServer({
      secure: false, disabledCommands: ['STARTTLS', 'AUTH'], authOptional: true, logger: false,
      onData(stream, _session, callback) {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          received.push(Buffer.concat(chunks));
          callback();
        });
      },
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    port = (server.server.address() as AddressInfo).port;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  test('gives out its input as one chunk, and reports its input\'s error', async () => {
    const parts = ['Subject: x\r\n', '\r\n', 'body line\r\n', Buffer.from('é\r\n')].map((p) => Buffer.from(p));
    const out: Buffer[] = [];
    for await (const chunk of wholeMessage(Readable.from(parts))) out.push(chunk as Buffer);
    assert.equal(out.length, 1);
    assert.deepEqual(out[0], Buffer.concat(parts));

    const failing = new Readable({ read() {} });
    const piped = wholeMessage(failing);
    failing.push(Buffer.from('part'));
    failing.destroy(new Error('source broke'));
    await assert.rejects(async () => {
      for await (const _ of piped) void _;
    }, /source broke/);

    // An input that closes before its end, without an error, is an error of the output, not a wait for ever.
    const cut = new Readable({ read() {} });
    const fromCut = wholeMessage(cut);
    cut.push(Buffer.from('part'));
    cut.destroy();
    await assert.rejects(async () => {
      for await (const _ of fromCut) void _;
    }, { code: 'ERR_STREAM_PREMATURE_CLOSE' });

    // A consumer that goes away stops the input.
    const endless = new Readable({ read() {} });
    const abandoned = wholeMessage(endless);
    endless.push(Buffer.from('part'));
    abandoned.destroy();
    await new Promise((resolve) => endless.once('close', resolve));
    assert.ok(endless.destroyed, 'input destroyed with its output');
  });

  test('a held message: not a byte before its hold resolves; when it rejects, none at all and the send fails', async () => {
    const parts = ['Subject: x\r\n', '\r\n', 'body\r\n'].map((p) => Buffer.from(p));
    let open!: () => void;
    const held = wholeMessage(Readable.from(parts), new Promise<void>((resolve) => (open = resolve)));
    const out: Buffer[] = [];
    held.on('data', (c: Buffer) => out.push(c));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(out.length, 0, 'held: nothing yet, though its input has ended');
    open();
    await new Promise((resolve) => held.once('end', resolve));
    assert.deepEqual(Buffer.concat(out), Buffer.concat(parts));

    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, maxConnections: 1 });
    installWholeMessage(transport);
    try {
      const count = received.length;
      const mail = { from: 'sender@example.com', to: 'ann@example.org', subject: 'Held', text: 'held body' };
      let release!: () => void;
      const sending = transport.sendMail({ ...mail, [HOLD_OPTION]: new Promise<void>((resolve) => (release = resolve)) } as typeof mail);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(received.length, count, 'nothing arrives while the hold is pending');
      release();
      await sending;
      assert.equal(received.length, count + 1);
      assert.match(received.at(-1)!.toString(), /held body/);

      // Rejected after the envelope went out: the send fails, the server gets no message, the transport goes on.
      let refuse!: (err: Error) => void;
      const refused = transport.sendMail({ ...mail, text: 'never sent', [HOLD_OPTION]: new Promise<void>((_, reject) => (refuse = reject)) } as typeof mail);
      await new Promise((r) => setTimeout(r, 300));
      refuse(new Error('not claimed'));
      await assert.rejects(refused, /not claimed/);
      await transport.sendMail({ ...mail, text: 'after the refusal' });
      assert.equal(received.length, count + 2);
      assert.match(received.at(-1)!.toString(), /after the refusal/);
      assert.ok(!received.some((r) => r.toString().includes('never sent')), 'the refused message never arrived');
    } finally {
      transport.close();
    }
  });

  /** Sends one message; returns the client's socket writes while it was sent, and what the server got. */
  async function send(whole: boolean, dkim?: { privateKey: string }): Promise<{ writes: number; raw: Buffer }> {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, maxConnections: 1 });
    installDkimSigner(transport);
    if (whole) installWholeMessage(transport);
    const mail = {
      from: 'Sender <sender@example.com>', to: 'ann@example.org', subject: 'Hello Ann', html: HTML, text: TEXT,
      ...(dkim ? { [DKIM_OPTION]: { signatures: [{ signingDomain: 'example.com', selector: 's1', privateKey: dkim.privateKey, algorithm: 'rsa-sha256' }] } } : {}),
    };
    try {
      await transport.sendMail({ ...mail, to: 'warm@example.org' }); // the connection is open and greeted before counting
      let writes = 0;
      const stop = watchSocketWrites(port, () => writes++);
      try {
        await transport.sendMail(mail);
      } finally {
        stop();
      }
      return { writes, raw: received.at(-1)! };
    } finally {
      transport.close();
    }
  }

  test('the same message arrives, in a few writes instead of one per composed chunk', async () => {
    const before = await send(false);
    const after = await send(true);
    // MAIL FROM, RCPT TO, DATA, the message, its terminating dot.
    assert.ok(after.writes <= 5, `writes with the step: ${after.writes}`);
    assert.ok(before.writes >= 12, `without it (what the step saves): ${before.writes}`);
    for (const { raw } of [before, after]) {
      const parsed = await simpleParser(raw);
      assert.equal(parsed.subject, 'Hello Ann');
      assert.equal(parsed.html, HTML);
      assert.equal(parsed.text, TEXT);
    }
  });

  test('a DKIM signature made before the write still verifies', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const pem = privateKey.export({ type: 'pkcs1', format: 'pem' }).toString();
    const { writes, raw } = await send(true, { privateKey: pem });
    assert.ok(writes <= 5, `writes: ${writes}`);
    const der = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
    const result = await dkimVerify(raw, {
      resolver: async (name: string, type: string) => {
        assert.equal(`${name} ${type}`, 's1._domainkey.example.com TXT');
        return [[`v=DKIM1; k=rsa; p=${der}`]];
      },
    });
    assert.equal(result.results.length, 1);
    assert.equal(result.results[0]!.status.result, 'pass', JSON.stringify(result.results[0]!.status));
  });
});
