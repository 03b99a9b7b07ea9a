// Renders one campaign e-mail: subject, HTML and text from the template with
// Liquid (the one engine of templates/render.ts), tracking links, the open
// pixel, a honeypot link, RFC 8058 one-click unsubscribe headers and our own
// Message-ID. Pure: everything it needs comes in, a nodemailer message goes out.
import type Mail from 'nodemailer/lib/mailer';
import { deriveAltContent, renderTemplate } from '../templates/render.ts';
import type { TrackingLinks } from './tracking-links.ts';

export type MessageInput = {
  sendLogId: string;
  contact: Record<string, unknown>;
  template: { subject: string | null; content: string; alt_content: string };
  account: { from_email: string; from_name: string | null };
  sendData: { from_name?: string; reply_to_name?: string; reply_to_email?: string; open_tracking?: boolean; click_tracking?: boolean };
  event: { name: string; occurred_at: Date | string; payload: Record<string, unknown> } | null;
  campaign: { id: string; name: string } | null;
  links: TrackingLinks;
  // Transactional messages (set only for them): the client's variables (top
  // level of the context and under `variables`), the recipient (who need not
  // be a contact), Reply-To, and whether List-Unsubscribe headers go out.
  variables?: Record<string, unknown>;
  hasContact?: boolean;
  toEmail?: string;
  toName?: string | null;
  replyTo?: string | null;
  listUnsubscribe?: boolean;
};

export type RenderedMessage = Mail.Options & { subject: string; html: string; text: string; messageId: string };

// Contact columns a template may read as `contact.*` (interface.md 2.5 minus
// internal bookkeeping); dates as ISO strings, so `| date:` works on them.
const HIDDEN_CONTACT_COLUMNS = new Set(['team_id']);

function contactVariables(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(row)) {
    if (HIDDEN_CONTACT_COLUMNS.has(k)) continue;
    out[k] = v instanceof Date ? v.toISOString() : v;
  }
  return out;
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (ch) => HTML_ESCAPES[ch]);
const unescapeHtml = (s: string) =>
  s.replace(/&(amp|lt|gt|quot|#39|#x27);/g, (_, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", '#x27': "'" })[e]!);

/**
 * Values a contact or an API client controls are escaped before they reach the
 * HTML, so `first_name: "<a href=…>"` is text, not a link in our sender's mail.
 * The subject and the text part get them as they are.
 */
function escapeDeep(value: unknown): unknown {
  if (typeof value === 'string') return escapeHtml(value);
  if (Array.isArray(value)) return value.map(escapeDeep);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, escapeDeep(v)]));
  return value;
}

const TRACKABLE = /^https?:\/\//i;
const HREF = /(<a\b[^>]*?\bhref\s*=\s*)(["'])(.*?)\2/gis;
const BARE_URL = /https?:\/\/[^\s<>"')\]]+/gi;

/** Every http(s) link of <a href> goes through the signed click redirect, except the unsubscribe link. */
function trackHtmlLinks(html: string, links: TrackingLinks, id: string, unsubscribeUrl: string): string {
  return html.replace(HREF, (whole, head: string, quote: string, raw: string) => {
    const url = unescapeHtml(raw.trim());
    if (!TRACKABLE.test(url) || url === unsubscribeUrl) return whole;
    return `${head}${quote}${escapeHtml(links.clickUrl(id, url))}${quote}`;
  });
}

function trackTextLinks(text: string, links: TrackingLinks, id: string, unsubscribeUrl: string): string {
  return text.replace(BARE_URL, (url) => (url === unsubscribeUrl ? url : links.clickUrl(id, url)));
}

/** Inserts before </body> when there is one, else appends. */
function beforeBodyEnd(html: string, fragment: string): string {
  const at = html.search(/<\/body\s*>/i);
  return at === -1 ? html + fragment : html.slice(0, at) + fragment + html.slice(at);
}

/** The Message-ID domain: the sender's, so receivers see an ID of the sending domain. */
function messageIdFor(sendLogId: string, fromEmail: string): string {
  const domain = fromEmail.split('@')[1] || 'plover.invalid';
  return `${sendLogId}@${domain}`;
}

const oneLine = (s: string) => s.replace(/[\r\n]+/g, ' ').trim();

export async function renderMessage(m: MessageInput): Promise<RenderedMessage> {
  const unsubscribeUrl = m.links.unsubscribeUrl(m.sendLogId);
  const payload = m.event?.payload ?? {};
  const contact = m.hasContact === false ? null : contactVariables(m.contact);
  // The client's variables come first: `contact` and `unsubscribe_url` are ours.
  const variables: Record<string, unknown> = m.variables
    ? { ...m.variables, variables: m.variables, contact, unsubscribe_url: unsubscribeUrl }
    : {
        contact,
        event: m.event
          ? { name: m.event.name, occurred_at: new Date(m.event.occurred_at).toISOString(), payload }
          : null,
        payload,
        campaign: m.campaign,
        unsubscribe_url: unsubscribeUrl,
      };
  const htmlVariables = { ...(escapeDeep(variables) as Record<string, unknown>), unsubscribe_url: unsubscribeUrl };

  const subject = oneLine(await renderTemplate(m.template.subject ?? '', variables));
  let html = await renderTemplate(m.template.content, htmlVariables);
  let text = m.template.alt_content ? await renderTemplate(m.template.alt_content, variables) : deriveAltContent(html);

  const openTracking = m.sendData.open_tracking !== false;
  const clickTracking = m.sendData.click_tracking !== false;
  if (clickTracking) {
    html = trackHtmlLinks(html, m.links, m.sendLogId, unsubscribeUrl);
    text = trackTextLinks(text, m.links, m.sendLogId, unsubscribeUrl);
  }
  if (openTracking || clickTracking) {
    // Invisible to people (display:none, no text a screen reader announces);
    // scanners that fetch every href follow it, which marks them as bots.
    const honeypot = escapeHtml(m.links.honeypotUrl(m.sendLogId));
    html = beforeBodyEnd(
      html,
      `<a href="${honeypot}" style="display:none!important;max-height:0;overflow:hidden;mso-hide:all" aria-hidden="true" tabindex="-1"></a>`,
    );
  }
  if (openTracking) {
    const pixel = escapeHtml(m.links.openPixelUrl(m.sendLogId));
    html = beforeBodyEnd(html, `<img src="${pixel}" width="1" height="1" alt="" style="display:block;width:1px;height:1px;border:0" />`);
  }

  const messageId = messageIdFor(m.sendLogId, m.account.from_email);
  const fromName = m.sendData.from_name || m.account.from_name || '';
  return {
    from: { name: oneLine(fromName), address: m.account.from_email },
    ...(m.replyTo
      ? { replyTo: m.replyTo }
      : m.sendData.reply_to_email
        ? { replyTo: { name: oneLine(m.sendData.reply_to_name ?? ''), address: m.sendData.reply_to_email } }
        : {}),
    to: m.toName ? { name: oneLine(m.toName), address: m.toEmail ?? String(m.contact.email) } : (m.toEmail ?? String(m.contact.email)),
    subject,
    html,
    text,
    messageId: `<${messageId}>`,
    headers: m.listUnsubscribe === false ? {} : {
      // Prepared: nodemailer would otherwise fold or encode the URL.
      'List-Unsubscribe': { prepared: true, value: `<${unsubscribeUrl}>` },
      'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
    },
  };
}
