// Pool tasks for templates (run in the untrusted pool's threads, see untrusted/pool.ts):
// checking a template at create time, and rendering one message (campaign,
// transactional or preview) from a template and its variables. Inputs and
// results are plain, structured-cloneable data; the tracking key is derived
// here from the secret the caller passes (secrets in a pool thread are no
// worse than in the process that started it).
//
// Compiled templates are cached per thread by template version (id and
// updated_at), so a campaign parses each template once per thread, not once
// per message; the cached source is compared with the given one, so a stale
// key can never render other text.
import { TrackingLinks, type UnsubscribeRecipient } from '../lib/tracking-links.ts';
import { rewriteHtml } from './html-links.ts';
import { escapeHtml } from '../lib/text.ts';
import type { ErrorDetail } from '../lib/errors.ts';
import type { RenderLimits } from '../lib/render-limits.ts';
import { describeLiquidError, limitErrorOf, parseCount, parseCounted, parseTemplate, renderParsed, threadCpuMs } from './render.ts';
import { htmlToText } from './html-text.ts';
import { mimePart, type MimePart } from './mime-part.ts';
import type { Template } from 'liquidjs';

export type TemplateField = 'subject' | 'content' | 'alt_content';

// ---- Compiled-template cache -------------------------------------------------

/**
 * What the cache holds at most per thread. Sources and their parsed form must
 * fit beside the largest task in the thread's heap (pool.ts,
 * DEFAULT_POOL_HEAP_MIB). A parsed tree costs 200-450 bytes per Liquid part
 * (render-limits.ts, LIQUID_MAX_PARTS), far more than its source's characters,
 * so the parts bound it: 100,000 parts, about 40 MiB at worst (two templates
 * at the parts cap), or hundreds of typical templates (tens to hundreds of
 * parts each). Characters bound the sources: eight 1 MiB templates of plain markup.
 */
const CACHE_MAX_CHARS = 8 * 1024 * 1024;
const CACHE_MAX_PARTS = 100_000;
const CACHE_MAX_ENTRIES = 2_000;
const cache = new Map<string, { source: string; templates: Template[]; parts: number }>();
let cachedChars = 0;
let cachedParts = 0;

function compiled(key: string | undefined, source: string): Template[] {
  if (key === undefined) return parseTemplate(source);
  const hit = cache.get(key);
  if (hit && hit.source === source) {
    cache.delete(key); // Map order is the LRU order
    cache.set(key, hit);
    return hit.templates;
  }
  const { templates, parts } = parseCounted(source);
  if (hit) {
    cache.delete(key);
    cachedChars -= hit.source.length;
    cachedParts -= hit.parts;
  }
  cache.set(key, { source, templates, parts });
  cachedChars += source.length;
  cachedParts += parts;
  for (const [k, v] of cache) {
    if (cachedChars <= CACHE_MAX_CHARS && cachedParts <= CACHE_MAX_PARTS && cache.size <= CACHE_MAX_ENTRIES) break;
    cache.delete(k);
    cachedChars -= v.source.length;
    cachedParts -= v.parts;
  }
  return templates;
}

/** This thread's parse count and cache size (tests of the cache). */
export function renderStats(): { parses: number; cached: number; cachedParts: number } {
  return { parses: parseCount(), cached: cache.size, cachedParts };
}

// ---- Variables ---------------------------------------------------------------

// Contact columns a template may read as `contact.*` (the contact of docs/api.md minus
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

// ---- Rendering one message ---------------------------------------------------

export type RenderMessageInput = {
  sendLogId: string;
  /** Null: the recipient is not a contact (transactional mail to an address). */
  contact: Record<string, unknown> | null;
  /** `key`: the template's version (id and updated_at); without it, nothing is cached. */
  template: { key?: string; subject: string | null; content: string; alt_content: string };
  sendData: { open_tracking?: boolean; click_tracking?: boolean };
  event: { name: string; occurred_at: Date | string; payload: Record<string, unknown> } | null;
  campaign: { id: string; name: string } | null;
  /** Extra top-level variables (transactional `variables`); never override the ones above. */
  variables?: Record<string, unknown>;
  /** What signed tracking URLs need; null renders inert links (dashboard preview). */
  links: { publicUrl: string; appSecret: string } | null;
  /** Whether the message carries an unsubscribe link (List-Unsubscribe); default true. */
  unsubscribe?: boolean;
  /**
   * Who the unsubscribe link is for. Given, the link names the recipient and
   * outlives the send log row (retention); absent, it names the row.
   */
  recipient?: UnsubscribeRecipient;
  limits: RenderLimits;
  /** HTML and text as nodemailer's MIME parts (mime-part.ts): the send path; without it, strings. */
  mime?: boolean;
};

export type RenderMessageResult =
  | { ok: true; subject: string; html: MimePart; text: MimePart; unsubscribeUrl: string | null }
  | { ok: false; field: TemplateField; message: string; limit: boolean; size?: boolean };

const linkMakers = new Map<string, TrackingLinks>();
function trackingLinks(publicUrl: string, appSecret: string): TrackingLinks {
  const key = `${publicUrl}\n${appSecret}`;
  let links = linkMakers.get(key);
  if (!links) {
    if (linkMakers.size > 8) linkMakers.clear();
    linkMakers.set(key, (links = new TrackingLinks(publicUrl, appSecret)));
  }
  return links;
}

const TRACKABLE = /^https?:\/\//i;
const BARE_URL = /https?:\/\/[^\s<>"')\]]+/gi;
const PREVIEW_UNSUBSCRIBE = '#unsubscribe-link-preview';
const oneLine = (s: string) => s.replace(/[\r\n]+/g, ' ').trim();

class FieldError extends Error {
  readonly field: TemplateField;
  readonly source: unknown;
  constructor(field: TemplateField, cause: unknown) {
    super(describeLiquidError(cause, 'render'));
    this.field = field;
    this.source = cause;
  }
}

function inField<T>(field: TemplateField, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw new FieldError(field, err);
  }
}

/** `pre`: templates the caller parsed already (checkTemplate's trial render), used instead of the cache. */
export function renderMessage(m: RenderMessageInput, pre?: Partial<Record<TemplateField, Template[]>>): RenderMessageResult {
  // One deadline for the whole message: subject, HTML and text share the
  // budget, counted in this thread's CPU time (render.ts, threadCpuMs).
  const deadline = threadCpuMs() + m.limits.renderBudgetMs;
  const links = m.links ? trackingLinks(m.links.publicUrl, m.links.appSecret) : null;
  const withUnsubscribe = m.unsubscribe !== false;
  const unsubscribeUrl = !withUnsubscribe ? null : links ? (m.recipient ? links.recipientUnsubscribeUrl(m.recipient) : links.unsubscribeUrl(m.sendLogId)) : PREVIEW_UNSUBSCRIBE;
  const payload = m.event?.payload ?? {};
  const variables: Record<string, unknown> = {
    // Transactional variables: at the top level and under `variables`; ours win.
    ...m.variables,
    ...(m.variables ? { variables: m.variables } : {}),
    contact: m.contact ? contactVariables(m.contact) : null,
    event: m.event ? { name: m.event.name, occurred_at: new Date(m.event.occurred_at).toISOString(), payload } : null,
    payload,
    campaign: m.campaign,
    unsubscribe_url: unsubscribeUrl ?? '',
  };
  const htmlVariables = { ...(escapeDeep(variables) as Record<string, unknown>), unsubscribe_url: unsubscribeUrl ?? '' };
  const parsed = (field: TemplateField, source: string) =>
    pre?.[field] ?? compiled(m.template.key === undefined ? undefined : `${m.template.key}:${field}`, source);

  try {
    const subject = inField('subject', () =>
      oneLine(renderParsed(parsed('subject', m.template.subject ?? ''), variables, m.limits, deadline)),
    );
    let html = inField('content', () => renderParsed(parsed('content', m.template.content), htmlVariables, m.limits, deadline));
    let text = m.template.alt_content
      ? inField('alt_content', () => renderParsed(parsed('alt_content', m.template.alt_content), variables, m.limits, deadline))
      : inField('content', () => htmlToText(html));

    const open = links !== null && m.sendData.open_tracking !== false;
    const click = links !== null && m.sendData.click_tracking !== false;
    let bodyEnd = '';
    if (open || click) {
      // Invisible to people (display:none, no text a screen reader announces);
      // scanners that fetch every href follow it, which marks them as bots.
      const honeypot = escapeHtml(links!.honeypotUrl(m.sendLogId));
      bodyEnd += `<a href="${honeypot}" style="display:none!important;max-height:0;overflow:hidden;mso-hide:all" aria-hidden="true" tabindex="-1"></a>`;
    }
    if (open) {
      const pixel = escapeHtml(links!.openPixelUrl(m.sendLogId));
      bodyEnd += `<img src="${pixel}" width="1" height="1" alt="" style="display:block;width:1px;height:1px;border:0" />`;
    }
    const track = (url: string) => (!TRACKABLE.test(url) || url === unsubscribeUrl ? null : links!.clickUrl(m.sendLogId, url));
    html = inField('content', () =>
      rewriteHtml(html, { rewriteHref: click ? track : undefined, bodyEnd: bodyEnd || undefined, maxChars: m.limits.maxHtmlChars }),
    );
    if (click) text = text.replace(BARE_URL, (url) => track(url) ?? url);
    // Only both parts together: nodemailer then composes multipart/alternative, each
    // part a child; a lone part would be the message's root node, and a raw root is
    // written as it is, without the message's own headers (From, To, Subject, …).
    if (m.mime && html && text) return { ok: true, subject, html: mimePart('html', html), text: mimePart('plain', text), unsubscribeUrl };
    return { ok: true, subject, html, text, unsubscribeUrl };
  } catch (err) {
    if (!(err instanceof FieldError)) throw err;
    const limit = limitErrorOf(err.source);
    return { ok: false, field: err.field, message: err.message, limit: limit !== undefined, ...(limit?.size ? { size: true } : {}) };
  }
}

// ---- Checking a template at create time ------------------------------------

export type CheckTemplateInput = {
  fields: Partial<Record<TemplateField, string>>;
  /** Derive alt_content from content when it is absent. */
  deriveAlt: boolean;
  limits: RenderLimits;
};
export type CheckTemplateResult = { details: ErrorDetail[]; altContent?: string };

// A contact with no values: what a trial render at create time sees.
const SAMPLE_CONTACT = { id: '00000000-0000-0000-0000-000000000000', email: 'sample@example.com' };

/**
 * Parses each field (syntax and parse-time caps), derives alt_content when
 * asked, then renders the template once for a contact without values: a
 * template over a render cap whatever the contact (a capture that doubles, a
 * huge range) is refused at create, not discovered at send. Other render
 * errors depend on the data and are left to the send.
 */
export function checkTemplate(input: CheckTemplateInput): CheckTemplateResult {
  const details: ErrorDetail[] = [];
  const parsed: Partial<Record<TemplateField, Template[]>> = {};
  // Parse time is a cap of its own, measured as this thread's CPU time (not in
  // the pool's queue, not on the wall clock): linear parsing makes it a
  // function of the template alone. The pool's threads run at a lower priority
  // (pool.ts), so on a busy machine their wall-clock time grows with the load
  // of others: a 490 KB template that parses in about 1 s of CPU was refused
  // at 3,233 ms of wall time.
  const parseTimed = (field: TemplateField, text: string, prefix = '') => {
    const started = threadCpuMs();
    try {
      parsed[field] = parseTemplate(text);
      const ms = threadCpuMs() - started;
      if (ms > input.limits.parseBudgetMs) {
        details.push({ field, message: `${prefix}template took ${Math.round(ms)} ms to parse; at most ${input.limits.parseBudgetMs} ms are allowed` });
      }
    } catch (err) {
      details.push({ field, message: `${prefix}${describeLiquidError(err)}${prefix ? '; send alt_content explicitly' : ''}` });
    }
  };
  for (const field of ['content', 'subject', 'alt_content'] as const) {
    const text = input.fields[field];
    if (text !== undefined) parseTimed(field, text);
  }
  if (details.length > 0) return { details };

  // A derived alt_content holds the Liquid of content, already tried there: the trial derives text instead of rendering it twice.
  const trial = renderMessage({
    sendLogId: SAMPLE_CONTACT.id,
    contact: SAMPLE_CONTACT,
    template: { subject: input.fields.subject ?? '', content: input.fields.content ?? '', alt_content: input.fields.alt_content ?? '' },
    sendData: { open_tracking: false, click_tracking: false },
    event: null,
    campaign: null,
    links: null,
    limits: input.limits,
  }, parsed);
  if (!trial.ok && trial.limit) return { details: [{ field: trial.field, message: trial.message }] };

  // The derived alt_content is parsed (syntax, parse time) only after the trial,
  // once the content's parse tree can be collected: 1 MiB of dense tags makes a
  // tree of about 100 MiB, and holding both trees at once needed over 192 MiB
  // of a pool thread's heap.
  let altContent = input.fields.alt_content;
  if (input.deriveAlt && altContent === undefined && input.fields.content !== undefined) {
    for (const field of Object.keys(parsed) as TemplateField[]) delete parsed[field];
    altContent = htmlToText(input.fields.content);
    parseTimed('alt_content', altContent, 'derived from content: ');
    delete parsed.alt_content;
    if (details.length > 0) return { details };
  }
  return { details, altContent };
}
