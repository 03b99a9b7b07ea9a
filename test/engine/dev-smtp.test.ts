import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import nodemailer from 'nodemailer';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');

describe('plover dev-smtp', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plover-dev-smtp-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('listens on 127.0.0.1, prints a summary of each message and stores it as .eml', async () => {
    const child = spawn(process.execPath, [CLI, 'dev-smtp', '--port', '0', '--out', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    try {
      const deadline = Date.now() + 30_000; // a loaded CI machine starts node slowly
      while (!/listening on 127\.0\.0\.1:(\d+)/.test(out)) {
        if (Date.now() > deadline) throw new Error(`no start-up line: ${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(out)![1]);
      const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, auth: { user: 'dev', pass: 'dev' } });
      await transport.sendMail({ from: 'a@plover.test', to: 'b@example.com', subject: 'Dev sink', text: 'hello from the test' });
      // nodemailer writes a non-ASCII subject as RFC 2047 encoded words; the sink prints it decoded.
      await transport.sendMail({ from: 'a@plover.test', to: 'c@example.com', subject: 'Willkommen, Jörg 🐦 — ein sehr langer Betreff, der auf mehrere kodierte Wörter verteilt wird', text: 'two' });
      transport.close();
      while ((out.match(/saved to/g) ?? []).length < 2) {
        if (Date.now() > deadline) throw new Error(`no message line: ${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.match(out, /--- message 1: from a@plover\.test to b@example\.com, \d+ bytes, subject: Dev sink/);
      assert.match(out, /--- message 2: from a@plover\.test to c@example\.com, \d+ bytes, subject: Willkommen, Jörg 🐦 — ein sehr langer Betreff, der auf mehrere kodierte Wörter verteilt wird\n/);
      const files = readdirSync(dir).filter((f) => f.endsWith('.eml')).sort();
      assert.equal(files.length, 2);
      assert.match(readFileSync(join(dir, files[0]), 'utf8'), /hello from the test/);
      assert.match(readFileSync(join(dir, files[1]), 'utf8'), /^Subject: =\?UTF-8\?/m, 'the stored message keeps its encoded header');
    } finally {
      child.kill('SIGTERM');
    }
  });
});
