// The plain-text part of an e-mail, derived from its HTML in one streaming
// pass over htmlparser2's Tokenizer: no DOM, no stack of open elements, no
// recursion, so time is linear in the input and memory is the output.
//
// Written by hand because html-to-text, even under its `limits` option
// (maxDepth, maxChildNodes, maxInputLength), first builds the whole document
// with htmlparser2's Parser, and that is quadratic on hostile markup: nested
// tables (480 KB: 11 s; 960 KB: 31 s) and unmatched closing tags (each one
// searches the stack of open elements; 768 KB: 60 s), and its recursive
// formatter overflowed the stack at a few thousand nested elements. The
// output follows html-to-text's conventions that our templates rely on:
// blocks on their own lines, `text [href]` for links, images and headings' case
// left alone, Liquid markup passed through as text.
import { QuoteType, Tokenizer } from 'htmlparser2';

// Paragraph-like blocks: a blank line around them.
const PARAGRAPHS = new Set(['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'pre', 'table', 'ul', 'ol', 'dl', 'hr', 'figure']);
// Other blocks: a line break around them.
const LINES = new Set([
  'div', 'tr', 'li', 'dt', 'dd', 'section', 'article', 'header', 'footer', 'nav', 'main', 'aside', 'address',
  'figcaption', 'form', 'fieldset', 'center', 'tbody', 'thead', 'tfoot', 'caption', 'body', 'html',
]);
// Nothing a reader sees.
const HIDDEN = new Set(['head', 'script', 'style', 'title', 'template']);
// Cells: separated by a space within their row.
const CELLS = new Set(['td', 'th']);
/** Link text kept at most, only to tell whether the href repeats it. */
const LINK_TEXT_MAX = 2048;

export function htmlToText(html: string): string {
  const out: string[] = [];
  let wrote = false; // anything on the page yet
  let atLineStart = true;
  let pendingBreak = 0; // newlines owed before the next text
  let pendingSpace = false;
  let hidden: string | null = null; // the element whose content is skipped
  let pre = 0;

  let tag = ''; // the open tag being read
  let attr = '';
  let attrValue: string[] | null = null;
  let href: string | null = null; // of the <a> being read
  let link: { href: string; text: string } | null = null;

  const block = (n: number) => {
    pendingBreak = Math.max(pendingBreak, n);
    pendingSpace = false;
  };
  const emit = (s: string) => {
    if (s === '') return;
    if (pendingBreak > 0 && wrote) {
      out.push('\n'.repeat(pendingBreak));
      atLineStart = true;
    } else if (pendingSpace && !atLineStart) {
      out.push(' ');
      if (link && link.text.length < LINK_TEXT_MAX) link.text += ' ';
    }
    pendingBreak = 0;
    pendingSpace = false;
    out.push(s);
    wrote = true;
    atLineStart = s.endsWith('\n');
    if (link && link.text.length < LINK_TEXT_MAX) link.text += s;
  };
  const text = (s: string) => {
    if (hidden !== null) return;
    if (pre > 0) return emit(s);
    const collapsed = s.replace(/[ \t\n\r\f]+/g, ' ');
    if (collapsed === '') return;
    const lead = collapsed.startsWith(' ');
    const trail = collapsed.length > 1 && collapsed.endsWith(' ');
    const core = collapsed.slice(lead ? 1 : 0, trail ? -1 : undefined);
    if (lead) pendingSpace = true;
    if (core !== '' && core !== ' ') emit(core);
    if (trail || (lead && core === '')) pendingSpace = true;
  };
  const endLink = () => {
    if (!link) return;
    const { href: target, text: shown } = link;
    link = null;
    if (target === '' || target.startsWith('#')) return;
    if (shown.trim() === '') return emit(target);
    if (shown.trim() === target) return;
    pendingSpace = true;
    emit(`[${target}]`);
  };

  const openTag = (name: string) => {
    if (hidden !== null) return;
    if (HIDDEN.has(name)) {
      hidden = name;
      return;
    }
    if (name === 'br') return emit('\n');
    if (name === 'hr') {
      block(2);
      emit('-'.repeat(40));
      return block(2);
    }
    if (PARAGRAPHS.has(name)) block(2);
    else if (LINES.has(name)) block(1);
    else if (CELLS.has(name)) pendingSpace = true;
    if (name === 'pre') pre++;
    if (name === 'li') emit(' * ');
    if (name === 'a') {
      endLink(); // an <a> inside an <a> closes the first (HTML's rule)
      if (href !== null) link = { href, text: '' };
    }
  };
  const closeTag = (name: string) => {
    if (hidden !== null) {
      if (name === hidden || (hidden === 'head' && name === 'body')) hidden = null;
      return;
    }
    if (name === 'a') return endLink();
    if (name === 'pre' && pre > 0) pre--;
    if (PARAGRAPHS.has(name)) block(2);
    else if (LINES.has(name)) block(1);
    else if (CELLS.has(name)) pendingSpace = true;
  };

  const tokenizer = new Tokenizer(
    { decodeEntities: true },
    {
      ontext: (start, end) => text(html.slice(start, end)),
      ontextentity: (cp) => text(String.fromCodePoint(cp)),
      onopentagname: (start, end) => {
        tag = html.slice(start, end).toLowerCase();
        href = null;
      },
      onattribname: (start, end) => {
        attr = tag === 'a' && end - start === 4 ? html.slice(start, end).toLowerCase() : '';
        attrValue = attr === 'href' && href === null ? [] : null;
      },
      onattribdata: (start, end) => void attrValue?.push(html.slice(start, end)),
      onattribentity: (cp) => void attrValue?.push(String.fromCodePoint(cp)),
      onattribend: (quote) => {
        if (attrValue && quote !== QuoteType.NoValue) href = attrValue.join('').trim();
        attrValue = null;
      },
      onopentagend: () => openTag(tag),
      onselfclosingtag: () => openTag(tag),
      onclosetag: (start, end) => closeTag(html.slice(start, end).toLowerCase()),
      oncdata: () => {},
      oncomment: () => {},
      ondeclaration: () => {},
      onprocessinginstruction: () => {},
      onend: () => {},
    },
  );
  tokenizer.write(html);
  tokenizer.end();
  endLink();
  return out.join('').trim();
}
