// The composed message goes to the SMTP socket in one write. nodemailer streams
// a message as it composes it: each header block, boundary and encoded part is
// its own chunk, and each chunk its own write on the socket (about a dozen for
// a two-part campaign e-mail), every one a system call that on a local relay
// also runs the receiving side's network stack. Collected first, the message is
// one chunk through the SMTP dot-stuffing stream and one write (and the final
// dot in a second one).
//
// Memory: the whole encoded message is held while it is written, its pieces
// and then the joined copy, once per message in flight (at most the SMTP
// connections of an account's transport). Its size is bounded by the render
// caps (RENDER_MAX_HTML_CHARS for the HTML part, RENDER_MAX_OUTPUT_CHARS for
// the subject and text), which count characters: UTF-8 and the transfer
// encoding (quoted-printable or base64) make the encoded message up to a few
// times larger. A DKIM signature held the message whole anyway, since its
// header goes before the body it hashes.
import { finished, Transform, type Readable } from 'node:stream';
import type { Transporter } from 'nodemailer';
import type { PluginMail } from './dkim-sign.ts';

/**
 * The message option that holds the message back: its bytes are written once
 * the promise resolves; if it rejects, not one is written and the send fails
 * with that error (nodemailer's `ESTREAM`; the pool closes that connection, so
 * a relay in the middle of DATA drops the partial message). The send task
 * gives it the message's claim, so the SMTP envelope goes out while the claim
 * commits (send.ts).
 */
export const HOLD_OPTION = 'ploverHold';

/** A stream that gives out its whole input as one chunk at the end (once `hold` has resolved, when given). */
export function wholeMessage(input: Readable, hold?: Promise<unknown>): Readable {
  const chunks: Buffer[] = [];
  const out = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      chunks.push(chunk);
      done();
    },
    flush(done) {
      const give = () => {
        done(null, chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
        chunks.length = 0;
      };
      if (!hold) return give();
      hold.then(give, (err: unknown) => {
        chunks.length = 0;
        done(err instanceof Error ? err : new Error(String(err)));
      });
    },
  });
  // nodemailer's contract for process functions: they read their input and
  // report its errors (or its end before the message ended) on their output; a
  // consumer that stops reading the output stops the input. Not stream.pipeline:
  // its AbortController makes a DOMException, stack and all, at every finish.
  finished(input, (err) => err && out.destroy(err));
  finished(out, (err) => err && input.destroy());
  return input.pipe(out);
}

/**
 * Installs the one-write step on a transport, after any plugin installed
 * before it (the DKIM signer: the signed message is what is written).
 */
export function installWholeMessage(transport: Transporter): void {
  transport.use('stream', (mail, callback) => {
    const hold = (mail as unknown as PluginMail).data[HOLD_OPTION] as Promise<unknown> | undefined;
    (mail as unknown as PluginMail).message.processFunc((input) => wholeMessage(input, hold));
    callback();
  });
}
