// Click tracking and the tracking fragment (pixel, honeypot) in one streaming
// pass over htmlparser2's Tokenizer. The markup is copied byte for byte except
// the href values that are rewritten; the fragment goes before the first
// </body> the tokenizer sees (not one inside a comment or a script), or at the
// end. Linear in the document: the regular expressions this replaces
// (`<a\b[^>]*?\bhref…` over the whole document) took 10 s on `<a ` repeated
// 100,000 times, because every `<a` rescanned the rest of the document.
import { QuoteType, Tokenizer } from 'htmlparser2';
import { TemplateLimitError } from './render.ts';
import { escapeHtml } from '../lib/text.ts';


export type HtmlRewrite = {
  /** The new target of an <a href>, unescaped; null keeps the link as it is. Absent: no link is touched. */
  rewriteHref?: (url: string) => string | null;
  /** Markup to insert before </body> (or append). */
  bodyEnd?: string;
  /** The result's length at most; over it, TemplateLimitError. */
  maxChars: number;
};

const isWs = (c: number) => c === 32 || c === 9 || c === 10 || c === 12 || c === 13;

export function rewriteHtml(html: string, opts: HtmlRewrite): string {
  const out: string[] = [];
  let size = 0;
  let copied = 0; // html before this index is in `out`
  const push = (s: string) => {
    size += s.length;
    if (size > opts.maxChars) throw new TemplateLimitError(`HTML with tracking is longer than ${opts.maxChars} characters`, true);
    out.push(s);
  };
  const copyTo = (end: number) => {
    if (end > copied) push(html.slice(copied, end));
    copied = Math.max(copied, end);
  };

  let inA = false;
  let hrefDone = false; // HTML uses the first href of a tag; later ones are ignored, and left alone
  let value: string[] | null = null;
  let valueStart = -1;
  let bodyEndDone = opts.bodyEnd === undefined;

  const tokenizer = new Tokenizer(
    { decodeEntities: true },
    {
      onopentagname: (start, end) => {
        inA = end - start === 1 && (html.charCodeAt(start) | 0x20) === 0x61; // a or A
        hrefDone = false;
      },
      onattribname: (start, end) => {
        value = null;
        if (!inA || hrefDone || !opts.rewriteHref || end - start !== 4 || html.slice(start, end).toLowerCase() !== 'href') return;
        hrefDone = true;
        // The value starts after `=`, optional blanks and an opening quote; this
        // scan covers only those few characters.
        let i = end;
        while (i < html.length && isWs(html.charCodeAt(i))) i++;
        if (html[i] !== '=') return;
        i++;
        while (i < html.length && isWs(html.charCodeAt(i))) i++;
        valueStart = html[i] === '"' || html[i] === "'" ? i + 1 : i;
        value = [];
      },
      onattribdata: (start, end) => void value?.push(html.slice(start, end)),
      onattribentity: (cp) => void value?.push(String.fromCodePoint(cp)),
      onattribend: (quote, endIndex) => {
        const parts = value;
        value = null;
        if (!parts || quote === QuoteType.NoValue) return;
        const target = opts.rewriteHref!(parts.join('').trim());
        if (target === null) return;
        const valueEnd = quote === QuoteType.Unquoted ? endIndex : endIndex - 1;
        copyTo(valueStart);
        push(quote === QuoteType.Unquoted ? `"${escapeHtml(target)}"` : escapeHtml(target));
        copied = valueEnd;
      },
      onopentagend: () => void (inA = false),
      onselfclosingtag: () => void (inA = false),
      onclosetag: (start, end) => {
        if (bodyEndDone || end - start !== 4 || html.slice(start, end).toLowerCase() !== 'body') return;
        bodyEndDone = true;
        copyTo(html.lastIndexOf('<', start));
        push(opts.bodyEnd!);
      },
      ontext: () => {},
      ontextentity: () => {},
      oncdata: () => {},
      oncomment: () => {},
      ondeclaration: () => {},
      onprocessinginstruction: () => {},
      onend: () => {},
    },
  );
  tokenizer.write(html);
  tokenizer.end();
  copyTo(html.length);
  if (!bodyEndDone) push(opts.bodyEnd!);
  return out.join('');
}
