// DKIM signing on the send path. nodemailer's own signer does RSA only, so the
// message nodemailer builds is signed by mailauth (RSA-SHA256 and
// Ed25519-SHA256), through a `stream` plugin of the transport: nodemailer
// composes the message, the plugin's process function hashes it and prepends
// one DKIM-Signature per key, and nodemailer sends the result with its own
// envelope, exactly as it would send its own signature.
import { pipeline, type Readable } from 'node:stream';
import type { DkimSignStream } from 'mailauth';
import type { Transporter } from 'nodemailer';
import type { SignatureData } from './dkim.ts';

/** The message option that carries the signatures to make (set by the send task). */
export const DKIM_OPTION = 'ploverDkim';
/** Its value: the signatures, and who hears of a signature the signer could not make (the message still goes). */
export type DkimOption = { signatures: SignatureData[]; onErrors?: (errors: unknown[]) => void };

// mailauth's default list, plus List-Unsubscribe-Post: RFC 8058 requires both
// List-Unsubscribe fields to be covered by a valid DKIM signature, and Gmail
// offers one-click unsubscribe only then.
export const SIGNED_HEADERS = [
  'From', 'Sender', 'Reply-To', 'Subject', 'Date', 'Message-ID', 'To', 'Cc', 'MIME-Version', 'Content-Type',
  'Content-Transfer-Encoding', 'Content-ID', 'Content-Description', 'In-Reply-To', 'References',
  'List-Id', 'List-Help', 'List-Unsubscribe', 'List-Unsubscribe-Post', 'List-Subscribe', 'List-Post', 'List-Owner', 'List-Archive',
  'Feedback-ID',
];

/** What a nodemailer `stream` plugin is given: the message's options and its MIME tree (typed loosely by nodemailer). */
export type PluginMail = {
  data: Record<string, unknown>;
  message: { processFunc(fn: (input: Readable) => Readable): void };
};

// mailauth (with its own copies of undici, tldts and encoding tables, about 2 MB
// of source that stays in the heap once loaded) is loaded at the first message
// that has a key to sign with, not by every process that imports the send path.
let loading: Promise<typeof DkimSignStream> | undefined;
const loadSigner = () => (loading ??= import('mailauth').then((m) => m.DkimSignStream));

/** A new signing stream for these keys; `onErrors` hears what the signer could not sign (the message still goes). */
function signStream(Signer: typeof DkimSignStream, { signatures, onErrors }: DkimOption): DkimSignStream {
  const stream = new Signer({ signatureData: signatures, headerList: SIGNED_HEADERS, canonicalization: 'relaxed/relaxed' } as never);
  if (onErrors) stream.once('end', () => stream.errors?.length && onErrors(stream.errors));
  return stream;
}

/** Installs the signer on a transport: every message that carries DKIM_OPTION is signed. */
export function installDkimSigner(transport: Transporter): void {
  transport.use('stream', (mail, callback) => {
    const option = (mail as unknown as PluginMail).data[DKIM_OPTION] as DkimOption | undefined;
    if (!option || option.signatures.length === 0) {
      callback();
      return;
    }
    loadSigner().then(
      (Signer) => {
        (mail as unknown as PluginMail).message.processFunc((input) =>
          // An error of the input is reported on the output (nodemailer's contract for process functions).
          pipeline(input, signStream(Signer, option), () => {}));
        callback();
      },
      (err: unknown) => callback(err as Error),
    );
  });
}
