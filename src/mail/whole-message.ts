// The composed message goes to the SMTP socket in one write. nodemailer streams
// a message as it composes it: each header block, boundary and encoded part is
// its own chunk, and each chunk its own write on the socket (about a dozen for
// a two-part campaign e-mail), every one a system call that on a local relay
// also runs the receiving side's network stack. The worker's CPU profile in
// `npm run bench -- campaigns` showed those writes at about a tenth of its main
// thread. Collected first, the message is one chunk through the SMTP dot-stuffing
// stream and one write.
//
// Memory: the whole encoded message is held once more while it is written. It
// is bounded by the render caps (RENDER_MAX_OUTPUT_CHARS per part), and its parts
// are already held whole as strings; a DKIM signature holds the message whole
// anyway, since its header goes before the body it hashes.
import { Transform, type Readable } from 'node:stream';
import type { Transporter } from 'nodemailer';

type PluginMail = { message: { processFunc(fn: (input: Readable) => Readable): void } };

/** A stream that gives out its whole input as one chunk at the end. */
export function wholeMessage(input: Readable): Readable {
  const chunks: Buffer[] = [];
  const out = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      chunks.push(chunk);
      done();
    },
    flush(done) {
      done(null, chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
      chunks.length = 0;
    },
  });
  // nodemailer's contract for process functions: they read their input and
  // report its errors on their output.
  input.once('error', (err) => out.destroy(err));
  return input.pipe(out);
}

/**
 * Installs the one-write step on a transport, after any plugin installed
 * before it (the DKIM signer: the signed message is what is written).
 */
export function installWholeMessage(transport: Transporter): void {
  transport.use('stream', (mail, callback) => {
    (mail as unknown as PluginMail).message.processFunc(wholeMessage);
    callback();
  });
}
