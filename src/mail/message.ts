// Renders one e-mail (campaign, transactional or dashboard preview): subject,
// HTML and text from the template with Liquid, tracking links, the open pixel,
// a honeypot link, RFC 8058 one-click unsubscribe headers and our own
// Message-ID. The Liquid and HTML work runs in the untrusted pool
// (templates/render-tasks.ts) under the caps of lib/render-limits.ts; this side
// only builds the nodemailer message from the result.
import type Mail from 'nodemailer/lib/mailer';
import { DEFAULT_RENDER_LIMITS, type RenderLimits } from '../lib/render-limits.ts';
import { untrustedPool, type UntrustedPool } from '../untrusted/pool.ts';
import type { RenderMessageInput, RenderMessageResult } from '../templates/render-tasks.ts';
import { RenderFailure, runTemplateTask } from '../templates/pool-run.ts';
import type { MimePart } from '../templates/mime-part.ts';

export type MessageInput = Omit<RenderMessageInput, 'limits' | 'contact'> & {
  contact: Record<string, unknown>;
  account: { from_email: string; from_name: string | null };
  sendData: RenderMessageInput['sendData'] & { from_name?: string; reply_to_name?: string; reply_to_email?: string };
  /** The recipient; default: the contact's e-mail. */
  to?: string;
  // Transactional messages (set only for them): the client's variables (top
  // level of the context and under `variables`), the recipient (who need not
  // be a contact), its display name, Reply-To, and whether List-Unsubscribe
  // headers go out (only when the template uses `{{ unsubscribe_url }}`).
  hasContact?: boolean;
  toEmail?: string;
  toName?: string | null;
  replyTo?: string | null;
  listUnsubscribe?: boolean;
};

export type RenderedMessage = Mail.Options & { subject: string; html: string; text: string; messageId: string };
/** As sent: HTML and text already encoded as MIME parts where nodemailer would quote them (templates/mime-part.ts). */
export type SendableMessage = Omit<RenderedMessage, 'html' | 'text'> & { html: MimePart; text: MimePart };

/**
 * `team`: whose message this is, for the pool's fair share between teams.
 * `mime`: the parts come back encoded for sending (a SendableMessage).
 */
export type RenderOptions = { limits?: RenderLimits; pool?: UntrustedPool; team?: string; mime?: boolean };


/** The Message-ID domain: the sender's, so receivers see an ID of the sending domain. */
function messageIdFor(sendLogId: string, fromEmail: string): string {
  const domain = fromEmail.split('@')[1] || 'plover.invalid';
  return `${sendLogId}@${domain}`;
}

const oneLine = (s: string) => s.replace(/[\r\n]+/g, ' ').trim();

export async function renderMessage(m: MessageInput, opts: RenderOptions & { mime: true }): Promise<SendableMessage>;
export async function renderMessage(m: MessageInput, opts?: RenderOptions): Promise<RenderedMessage>;
export async function renderMessage(m: MessageInput, opts: RenderOptions = {}): Promise<RenderedMessage | SendableMessage> {
  const limits = opts.limits ?? DEFAULT_RENDER_LIMITS;
  const { account, to, hasContact, toEmail, toName, replyTo, listUnsubscribe, ...rest } = m;
  const input: RenderMessageInput = {
    ...rest,
    contact: hasContact === false ? null : m.contact,
    sendData: { open_tracking: m.sendData.open_tracking, click_tracking: m.sendData.click_tracking },
    ...(listUnsubscribe === false ? { unsubscribe: false } : {}),
    limits,
    ...(opts.mime ? { mime: true } : {}),
  };
  // A cache miss parses too: the budget covers a parse and a render.
  const r = await runTemplateTask<RenderMessageResult>(opts.pool ?? untrustedPool(), 'renderMessage', input, limits.parseBudgetMs + limits.renderBudgetMs, opts.team);
  if (!r.ok) throw new RenderFailure(r.field, r.limit ? 'limit' : 'liquid', `${r.field}: ${r.message}`, r.size === true);

  const messageId = messageIdFor(m.sendLogId, account.from_email);
  const fromName = m.sendData.from_name || account.from_name || '';
  const address = toEmail ?? to ?? String(m.contact.email);
  return {
    from: { name: oneLine(fromName), address: account.from_email },
    ...(replyTo
      ? { replyTo }
      : m.sendData.reply_to_email
        ? { replyTo: { name: oneLine(m.sendData.reply_to_name ?? ''), address: m.sendData.reply_to_email } }
        : {}),
    to: toName ? { name: oneLine(toName), address } : address,
    subject: r.subject,
    html: r.html,
    text: r.text,
    messageId: `<${messageId}>`,
    ...(r.unsubscribeUrl && m.links
      ? {
          headers: {
            // Prepared: nodemailer would otherwise fold or encode the URL.
            'List-Unsubscribe': { prepared: true, value: `<${r.unsubscribeUrl}>` },
            'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
          },
        }
      : {}),
  };
}
