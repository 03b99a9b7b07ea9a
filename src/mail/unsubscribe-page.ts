// Small server-rendered pages for recipients: the unsubscribe confirmation, the
// "done" page, and the plain page for a link we do not recognise. Every value
// is escaped; the pages load nothing (inline style only) and the form posts
// back to the page's own URL, so a PUBLIC_URL with a path prefix still works.
import { escapeHtml } from '../lib/text.ts';

/** Headers of every page: no caching (the URL is a capability), no framing, no referrer leak. */
export const PAGE_HEADERS: Record<string, string> = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'referrer-policy': 'no-referrer',
  'x-robots-tag': 'noindex, nofollow',
  'x-content-type-options': 'nosniff',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
};

const STYLE =
  'body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222;line-height:1.5}' +
  'h1{font-size:1.4rem}button{font-size:1rem;padding:.6rem 1.2rem;border:0;border-radius:.3rem;background:#222;color:#fff;cursor:pointer}' +
  '.muted{color:#666;font-size:.9rem}';

function page(title: string, body: string): string {
  return (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">' +
    '<meta name="viewport" content="width=device-width,initial-scale=1"><meta name="robots" content="noindex,nofollow">' +
    `<title>${escapeHtml(title)}</title><style>${STYLE}</style></head><body>${body}</body></html>`
  );
}

export type UnsubscribeView = { email: string; teamName: string };

/**
 * GET: asks for confirmation. Unsubscribing on GET would let link scanners,
 * which prefetch every URL of a message, unsubscribe people who never asked.
 */
export function confirmPage(v: UnsubscribeView): string {
  return page(
    'Unsubscribe',
    `<h1>Unsubscribe</h1>` +
      `<p>Stop e-mails from <strong>${escapeHtml(v.teamName)}</strong> to <strong>${escapeHtml(v.email)}</strong>?</p>` +
      // No action attribute: the form posts to this page's own URL.
      `<form method="post"><input type="hidden" name="confirm" value="unsubscribe">` +
      `<button type="submit">Unsubscribe</button></form>`,
  );
}

export function alreadyUnsubscribedPage(v: UnsubscribeView): string {
  return page(
    'Unsubscribed',
    `<h1>You are unsubscribed</h1><p><strong>${escapeHtml(v.email)}</strong> no longer receives e-mails from ` +
      `<strong>${escapeHtml(v.teamName)}</strong>.</p>`,
  );
}

export function donePage(v: UnsubscribeView): string {
  return page(
    'Unsubscribed',
    `<h1>You have been unsubscribed</h1><p><strong>${escapeHtml(v.email)}</strong> will receive no more e-mails from ` +
      `<strong>${escapeHtml(v.teamName)}</strong>.</p><p class="muted">You can close this page.</p>`,
  );
}

export function linkNotFoundPage(): string {
  return page('Link not found', '<h1>Link not found</h1><p>This link is not valid. It may have been copied incompletely.</p>');
}

export function errorPage(status: number): string {
  const title = status >= 500 ? 'Something went wrong' : 'Bad request';
  const text = status >= 500 ? 'Please try again in a moment.' : 'The request could not be understood.';
  return page(title, `<h1>${escapeHtml(title)}</h1><p>${escapeHtml(text)}</p>`);
}

/** What the honeypot answers: an empty page, nothing for a scanner to follow. */
export function honeypotPage(): string {
  return page('.', '');
}
