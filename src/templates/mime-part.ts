// A message's HTML and text parts, encoded for MIME where the message is rendered (a
// render pool thread), not on the event loop that sends it.
//
// nodemailer encodes each text/* alternative while it composes the message, on the
// sending process's event loop: for a quoted-printable part it scans the whole text
// twice to choose the encoding and then encodes it in JavaScript, about 1.6 ms of a
// 60 KiB newsletter's 2.4 ms of composing (bench campaigns --template-kb 60), while
// the message's SMTP transaction waits. Handed the part already encoded (nodemailer's
// `raw` part, headers included), it writes it as it is.
//
// The part is byte for byte what nodemailer would write for the same text
// (test/mail/mime-part.test.ts composes both ways and compares): the same choice of
// encoding (MimeNode.getTransferEncoding for a text string) and nodemailer's own
// quoted-printable encoder, fed as MimeNode feeds it. Only quoted-printable parts are encoded
// here: a 7bit part is written as it is anyway, and base64 (text mostly outside Latin
// script) is native code in nodemailer; both stay strings.
import { hasLongerLines, isPlainText } from 'nodemailer/lib/mime-funcs';
import { Encoder } from 'nodemailer/lib/qp';

/** A text/* alternative for nodemailer: the text, or the whole encoded part as `raw`. */
export type MimePart = string | { raw: string };

const LINE_LENGTH = 76;
/**
 * Longer texts are left to nodemailer, which encodes them as a stream: encoded
 * here, a text near the HTML cap (8 Mi characters, mostly accented letters)
 * would become a quoted-printable string of up to three times its bytes, held
 * whole in the thread and then in the sender. Newsletters are far below it
 * (Gmail clips at 102 KiB).
 */
export const MAX_ENCODED_CHARS = 1024 * 1024;

/**
 * `text` as the `html` (subtype `html`) or `text` (`plain`) alternative of a
 * nodemailer message that has both (multipart/alternative): a `raw` part as the
 * message's only part would be its root, written without the message's headers.
 * Byte for byte nodemailer's own only while the message sets none of
 * `textEncoding`, `encoding`, `newline` or `attachDataUrls` (mail/send.ts sets none).
 */
export function mimePart(subtype: 'html' | 'plain', text: string): MimePart {
  // An empty part is left out of the message by nodemailer: it stays as it is.
  if (!text || text.length > MAX_ENCODED_CHARS) return text;
  // As MimeNode: plain text with short lines goes as 7bit, unencoded.
  if (isPlainText(text) && !hasLongerLines(text, LINE_LENGTH)) return text;
  if (!mostlyLatin(text)) return text;
  return { raw: `Content-Type: text/${subtype}; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n${quotedPrintable(text)}` };
}

/**
 * The text through nodemailer's quoted-printable stream encoder, given it as
 * nodemailer does (the whole text, one chunk): its soft line breaks depend on
 * how it slices its input (64 KiB), so the one-call `wrap(encode(text))` differs
 * past the first slice. Driven synchronously through its transform hooks, its
 * output collected as it pushes it.
 */
function quotedPrintable(text: string): string {
  const out: string[] = [];
  const encoder = new Encoder();
  encoder.push = (chunk: unknown) => {
    if (typeof chunk === 'string') out.push(chunk);
    else if (chunk != null) throw new Error('quoted-printable encoder pushed a non-string chunk');
    return true;
  };
  const fail = (err?: Error | null) => {
    if (err) throw err;
  };
  // 'buffer': the encoding a stream gives _transform with a Buffer chunk.
  encoder._transform(Buffer.from(text, 'utf8'), 'buffer' as BufferEncoding, fail);
  encoder._flush(fail);
  return out.join('');
}

/**
 * nodemailer's choice between quoted-printable and base64 for a text value
 * (MimeNode._getTextEncoding): quoted-printable when Latin letters outnumber
 * control characters and characters outside ASCII.
 */
function mostlyLatin(text: string): boolean {
  let other = 0;
  let latin = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c <= 0x08 || c === 0x0b || c === 0x0c || (c >= 0x0e && c <= 0x1f) || c >= 0x80) other++;
    else if ((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)) latin++;
  }
  return other < latin;
}
