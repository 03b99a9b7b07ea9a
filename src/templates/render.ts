// The one Liquid engine of the service: templates are checked at create time
// with the same engine (same options, same tags and filters) that renders them
// at send time, so a template that was accepted always parses when it is sent.
import { compile } from 'html-to-text';
import { Liquid, LiquidError } from 'liquidjs';
import type { ErrorDetail } from '../http/errors.ts';

// Tags that read other templates from a file system. A team's template must not
// reach files on the server (`{% include "/etc/passwd" %}`), so they are refused
// at parse time (422 at create) rather than failing at send time.
const FILE_TAGS = ['include', 'render', 'layout'];

export const liquid = new Liquid({
  // An unknown filter is a typo (`defualt`), not something to skip silently.
  strictFilters: true,
  // Only the variables we pass in, never prototype properties.
  ownPropertyOnly: true,
  // No file system: an empty in-memory template map.
  templates: {},
  // Content is at most 1 MiB (+ subject and alt content); the limits bound what
  // a hostile template can cost one render (decided: 1 s and 100 MB of objects).
  parseLimit: 4 * 1024 * 1024,
  renderLimit: 1_000,
  memoryLimit: 100 * 1024 * 1024,
});
for (const name of FILE_TAGS) {
  liquid.registerTag(name, {
    parse() {
      throw new Error(`tag "${name}" is not available: templates cannot load other files`);
    },
    render() {
      return '';
    },
  });
}

/** `ParseError: tag {% if x %} not closed, line:3, col:1` → line 3, `tag {% if x %} not closed`. */
function describeLiquidError(err: unknown): string {
  if (err instanceof LiquidError) {
    const [line] = err.token?.getPosition?.() ?? [];
    const text = (err.originalError?.message ?? err.message).replace(/, line:\d+, col:\d+$/, '');
    return line ? `Liquid syntax error at line ${line}: ${text}` : `Liquid syntax error: ${text}`;
  }
  return `Liquid syntax error: ${(err as Error)?.message ?? String(err)}`;
}

/** Parses each given field with the engine; one detail per field that does not parse. */
export function checkLiquidSyntax(fields: Record<string, string | undefined>): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  for (const [field, text] of Object.entries(fields)) {
    if (text === undefined) continue;
    try {
      liquid.parse(text);
    } catch (err) {
      details.push({ field, message: describeLiquidError(err) });
    }
  }
  return details;
}

// Headings are not upper-cased: that would turn `{{ contact.first_name }}` into
// `{{ CONTACT.FIRST_NAME }}`. Lines are not wrapped: wrapping could split a
// quoted string inside `{{ … | default: "two words" }}`.
const htmlToText = compile({
  wordwrap: false,
  selectors: [
    ...['h1', 'h2', 'h3', 'h4', 'h5', 'h6'].map((selector) => ({ selector, options: { uppercase: false } })),
    { selector: 'img', format: 'skip' },
  ],
});

/** Plain-text alternative of an HTML template; the Liquid markup passes through as text. */
export function deriveAltContent(html: string): string {
  return htmlToText(html);
}

/** Renders a stored template string with the given variables (`contact`, `unsubscribe_url`, …). */
export async function renderTemplate(text: string, variables: Record<string, unknown>): Promise<string> {
  return liquid.parseAndRender(text, variables);
}
