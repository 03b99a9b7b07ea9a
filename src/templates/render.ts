// The one Liquid engine of the service: templates are checked at create time
// with the same engine (same options, same tags and filters) that renders them
// at send time, so a template that was accepted always parses when it is sent.
//
// It runs inside the untrusted pool's threads (templates/render-tasks.ts),
// never on an event loop that answers requests, and every cap of lib/render-limits.ts is
// enforced here, so no caller can forget one:
// - parsing is linear (LinearParser) and block nesting is capped;
// - every character a render writes is counted, including text written into a
//   `capture` and values stored by `assign` (liquidjs's memoryLimit counts
//   filter results but neither of those: a doubling capture reached 167
//   million characters);
// - loop iterations are counted, and a `(1..N)` range larger than the loop cap
//   is refused before liquidjs builds the array (a 100-million range slipped
//   under memoryLimit and cost 2.5 GB).
import {
  AssignTag,
  Context,
  ForTag,
  Liquid,
  LiquidError,
  Parser,
  TablerowTag,
  Tokenizer,
  TypeGuards,
  evalToken,
  toValue,
  type Emitter,
  type Template,
  type TopLevelToken,
} from 'liquidjs';
import { DEFAULT_RENDER_LIMITS, LIQUID_MAX_NESTING, LIQUID_MAX_PARTS, LIQUID_MEMORY_UNITS, TEMPLATE_MAX_CHARS, type RenderLimits } from '../lib/render-limits.ts';

// Tags that read other templates from a file system. A team's template must not
// reach files on the server (`{% include "/etc/passwd" %}`), so they are refused
// at parse time (422 at create) rather than failing at send time.
const FILE_TAGS = ['include', 'render', 'layout'];

/** A template or render over one of the caps of lib/render-limits.ts: the template's fault, reported as such (422, or a failed message). */
export class TemplateLimitError extends Error {
  /** A cap on characters written (the render's output, the final HTML), not on time or loops. */
  readonly size: boolean;
  constructor(message: string, size = false) {
    super(message);
    this.name = 'TemplateLimitError';
    this.size = size;
  }
}

export const liquid = new Liquid({
  // An unknown filter is a typo (`defualt`), not something to skip silently.
  strictFilters: true,
  // Only the variables we pass in, never prototype properties.
  ownPropertyOnly: true,
  // No file system: an empty in-memory template map.
  templates: {},
  // Per-render defaults; renderParsed passes its own (a wall-clock backstop of four budgets).
  renderLimit: DEFAULT_RENDER_LIMITS.renderBudgetMs,
  memoryLimit: LIQUID_MEMORY_UNITS,
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

// ---- What one render may still spend ----------------------------------------

/**
 * This thread's CPU time, ms. Render and parse budgets count it rather than the
 * wall clock: the pool's threads run at a lower priority (untrusted/pool.ts), so
 * on a loaded machine their wall time grows with everyone else's work, and a
 * legitimate 490 KB template failed its 3 s budget in a CI run while using a
 * fraction of it. The pool's wall-clock backstop still ends a task that never
 * finishes.
 */
export function threadCpuMs(): number {
  const { user, system } = process.threadCpuUsage();
  return (user + system) / 1000;
}

// The CPU clock is read once per this many blocks, loop iterations and captures
// (a read costs about a microsecond; a block is at least several).
const CPU_CHECK_EVERY = 32;

class RenderBudget {
  private written = 0;
  private iterations = 0;
  private calls = 0;
  private readonly limits: RenderLimits;
  private readonly cpuDeadline: number;
  constructor(limits: RenderLimits, cpuDeadline = threadCpuMs() + limits.renderBudgetMs) {
    this.limits = limits;
    this.cpuDeadline = cpuDeadline;
  }
  tick(): void {
    if (++this.calls % CPU_CHECK_EVERY === 0 && threadCpuMs() > this.cpuDeadline) {
      throw new TemplateLimitError('took longer than its render budget');
    }
  }
  write(chars: number): void {
    this.written += chars;
    if (this.written > this.limits.maxOutputChars) {
      throw new TemplateLimitError(
        `renders more than ${this.limits.maxOutputChars} characters (text written into capture and assign counts too)`,
        true,
      );
    }
  }
  loop(count: number): void {
    this.iterations += count;
    if (this.iterations > this.limits.maxLoopIterations) {
      throw new TemplateLimitError(`runs more than ${this.limits.maxLoopIterations} loop iterations`);
    }
  }
  range(size: number): void {
    if (size > this.limits.maxLoopIterations) {
      throw new TemplateLimitError(`uses a range of ${size} items; at most ${this.limits.maxLoopIterations} are allowed`);
    }
  }
}

const budgets = new WeakMap<Context, RenderBudget>();
function budgetOf(ctx: Context): RenderBudget {
  let b = budgets.get(ctx);
  if (!b) budgets.set(ctx, (b = new RenderBudget(DEFAULT_RENDER_LIMITS)));
  return b;
}

function stringify(value: unknown): string {
  const v = toValue(value);
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) return v.map(stringify).join('');
  return String(v);
}

/** liquidjs's SimpleEmitter, counting: every top-level render and every `capture` gets one. */
class CountingEmitter implements Emitter {
  buffer = '';
  private readonly budget: RenderBudget;
  constructor(budget: RenderBudget) {
    this.budget = budget;
  }
  write(html: unknown): void {
    const s = stringify(html);
    this.budget.write(s.length);
    this.buffer += s;
  }
}

// Bodies of `for` and `tablerow`: one renderTemplates call on them is one iteration.
const loopBodies = new WeakSet<Template[]>();

// liquidjs has no option to supply the emitter of nested renders (capture
// makes its own SimpleEmitter) nor a per-iteration hook, but every block,
// capture and loop body goes through renderer.renderTemplates: wrapping that
// one method counts all output and all iterations.
const baseRenderTemplates = liquid.renderer.renderTemplates.bind(liquid.renderer);
liquid.renderer.renderTemplates = function* (templates: Template[], ctx: Context, emitter?: Emitter) {
  const budget = budgetOf(ctx);
  budget.tick();
  if (loopBodies.has(templates)) budget.loop(1);
  return yield* baseRenderTemplates(templates, ctx, emitter ?? new CountingEmitter(budget));
};

/** A `(a..b)` collection is sized from its bounds before liquidjs allocates it. */
function* checkRange(token: unknown, ctx: Context): Generator<unknown, void, unknown> {
  if (!TypeGuards.isRangeToken(token)) return;
  const low = Number(toValue(yield evalToken(token.lhs, ctx)));
  const high = Number(toValue(yield evalToken(token.rhs, ctx)));
  budgetOf(ctx).range(Number.isFinite(high - low) ? Math.max(0, high - low + 1) : Infinity);
}

class CountedFor extends ForTag {
  constructor(...args: ConstructorParameters<typeof ForTag>) {
    super(...args);
    loopBodies.add(this.templates);
  }
  override *render(ctx: Context, emitter: Emitter): Generator<unknown, void | string, Template[]> {
    yield* checkRange(this.collection, ctx) as Generator<unknown, void, Template[]>;
    return yield* super.render(ctx, emitter);
  }
}

class CountedTablerow extends TablerowTag {
  constructor(...args: ConstructorParameters<typeof TablerowTag>) {
    super(...args);
    loopBodies.add(this.templates);
  }
  override *render(ctx: Context, emitter: Emitter): Generator<unknown, void, unknown> {
    yield* checkRange(this.collection, ctx);
    yield* super.render(ctx, emitter);
  }
}

class CountedAssign extends AssignTag {
  override *render(ctx: Context): Generator<unknown, void, unknown> {
    yield* super.render(ctx);
    const value = toValue(ctx.bottom()[(this as unknown as { key: string }).key]);
    if (typeof value === 'string' || Array.isArray(value)) budgetOf(ctx).write(value.length);
  }
}

liquid.registerTag('for', CountedFor);
liquid.registerTag('tablerow', CountedTablerow);
liquid.registerTag('assign', CountedAssign);

// ---- Parsing ----------------------------------------------------------------

/**
 * liquidjs consumes its token list with Array#shift, which V8 does in
 * constant time only for small arrays; past about 16,000 tokens every shift
 * copies the rest, so a 1 MiB template of `{{ x }}` took 17 s to parse. The
 * parser only ever calls `shift()` and reads `length` on that list (top level,
 * ParseStream, capture, raw, block, the `liquid` tag), so a cursor over the
 * array is a drop-in, linear replacement; there is no option for it.
 */
class TokenQueue {
  private next = 0;
  private readonly items: TopLevelToken[];
  constructor(items: TopLevelToken[]) {
    this.items = items;
  }
  get length(): number {
    return this.items.length - this.next;
  }
  shift(): TopLevelToken | undefined {
    return this.next < this.items.length ? this.items[this.next++] : undefined;
  }
}
const asQueue = (tokens: TopLevelToken[]) => (Array.isArray(tokens) ? (new TokenQueue(tokens) as unknown as TopLevelToken[]) : tokens);

class LinearParser extends Parser {
  override parseTokens(tokens: TopLevelToken[]): Template[] {
    return super.parseTokens(asQueue(tokens));
  }
  override parseStream(tokens: TopLevelToken[]) {
    return super.parseStream(asQueue(tokens));
  }
}

const BLOCK_TAGS = new Set(['if', 'unless', 'for', 'case', 'capture', 'tablerow', 'comment', 'raw', 'block']);

/** Occurrences of `{{` and `{%` (each tag or output starts with one): bounds the top-level token list before it is built. */
function countMarkupStarts(text: string): number {
  let n = 0;
  for (let at = text.indexOf('{'); at !== -1 && at < text.length - 1; at = text.indexOf('{', at + 1)) {
    const next = text.charCodeAt(at + 1);
    if (next === 0x7b || next === 0x25) n++; // '{', '%'
  }
  return n;
}

const isSpace = (c: number) => c === 0x20 || (c >= 0x09 && c <= 0x0d);
// Characters of one liquidjs identifier or number (`first_name`, `empty?`, `my-var`,
// `42`). Not `.`: each step of a property chain is a token of its own
// (`{{ x.a.a.a… }}`, one output, built 500,000 of them).
const isWordChar = (c: number) =>
  (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c === 0x2d || c === 0x3f || c > 0x7f;

/**
 * The parts of one tag's or output's markup: each run of name characters, each
 * quoted string and each other mark (`.`, `|`, `:`, `,`, `(`, `=`, ...) is one.
 * It is an upper bound of the expression tokens liquidjs builds from it.
 */
function countParts(markup: string, begin: number, end: number): number {
  let n = 0;
  for (let i = begin; i < end; ) {
    const c = markup.charCodeAt(i);
    if (isSpace(c)) {
      i++;
    } else if (c === 0x22 || c === 0x27) {
      // A quoted string, backslash escapes as liquidjs reads them.
      let j = i + 1;
      while (j < end && markup.charCodeAt(j) !== c) j += markup.charCodeAt(j) === 0x5c ? 2 : 1;
      i = j + 1;
      n++;
    } else if (isWordChar(c)) {
      while (i < end && isWordChar(markup.charCodeAt(i))) i++;
      n++;
    } else {
      i++;
      n++;
    }
  }
  return n;
}

const tooManyParts = () =>
  new TemplateLimitError(`has more than ${LIQUID_MAX_PARTS} Liquid parts (tags, outputs, and the names, values, filters and operators in them)`);

/**
 * One pass over the tokens: more Liquid parts than LIQUID_MAX_PARTS, or blocks
 * nested deeper than the cap, are refused before the (recursive) parser builds
 * its tree.
 */
function checkTokens(tokens: TopLevelToken[]): number {
  const open: string[] = [];
  let parts = 0;
  for (const token of tokens) {
    if (TypeGuards.isOutputToken(token) || TypeGuards.isTagToken(token)) {
      parts += 1 + countParts(token.input, ...token.contentRange);
      if (parts > LIQUID_MAX_PARTS) throw tooManyParts();
    }
    if (!TypeGuards.isTagToken(token)) continue;
    const name = token.name;
    if (BLOCK_TAGS.has(name)) {
      open.push(name);
      if (open.length > LIQUID_MAX_NESTING) {
        throw new TemplateLimitError(`blocks are nested more than ${LIQUID_MAX_NESTING} deep (line ${token.getPosition()[0]})`);
      }
    } else if (name.startsWith('end')) {
      const at = open.lastIndexOf(name.slice(3));
      if (at !== -1) open.length = at;
    }
  }
  return parts;
}

let parses = 0;
/** Templates parsed by this thread since it started (tests check the compiled-template cache with it). */
export const parseCount = () => parses;

/** Parses one template with every parse-time cap; throws LiquidError (syntax) or TemplateLimitError. */
export function parseTemplate(text: string): Template[] {
  return parseCounted(text).templates;
}

/** parseTemplate, with the template's Liquid parts (what its tree costs: the compiled-template cache weighs entries by it). */
export function parseCounted(text: string): { templates: Template[]; parts: number } {
  if (text.length > TEMPLATE_MAX_CHARS) throw new TemplateLimitError(`is longer than ${TEMPLATE_MAX_CHARS} characters`);
  if (countMarkupStarts(text) > LIQUID_MAX_PARTS) throw tooManyParts();
  parses++;
  const o = liquid.options;
  const tokens = new Tokenizer(text, o.operators, undefined, undefined, o.groupedExpressions).readTopLevelTokens(o);
  const parts = checkTokens(tokens);
  return { templates: new LinearParser(liquid).parseTokens(tokens), parts };
}

/**
 * Renders parsed templates synchronously (a pool thread has nothing else to do)
 * under the limits, by `cpuDeadline` (this thread's CPU time, threadCpuMs()).
 * liquidjs's own wall-clock renderLimit stays as a backstop at four budgets.
 */
export function renderParsed(
  templates: Template[],
  variables: Record<string, unknown>,
  limits: RenderLimits = DEFAULT_RENDER_LIMITS,
  cpuDeadline = threadCpuMs() + limits.renderBudgetMs,
): string {
  const ctx = new Context(variables, liquid.options, {
    sync: true,
    renderLimit: 4 * limits.renderBudgetMs,
    memoryLimit: LIQUID_MEMORY_UNITS,
  }, { liquid });
  budgets.set(ctx, new RenderBudget(limits, cpuDeadline));
  return liquid.renderSync(templates, ctx) as string;
}

// liquidjs's own limits (memoryLimit, renderLimit) fail with these messages: caps like ours.
const LIQUID_LIMITS: Record<string, string> = {
  'memory alloc limit exceeded': `builds more than ${LIQUID_MEMORY_UNITS} characters or items with filters and ranges`,
  'template render limit exceeded': 'took longer than its render budget',
};

/** The cap error behind a (possibly wrapped) liquidjs error, if any. */
export function limitErrorOf(err: unknown): TemplateLimitError | undefined {
  let e = err as { originalError?: unknown; message?: unknown } | undefined;
  for (let i = 0; i < 5 && e; i++) {
    if (e instanceof TemplateLimitError) return e;
    const liquidLimit = typeof e.message === 'string' ? LIQUID_LIMITS[e.message] : undefined;
    if (liquidLimit && !(e instanceof LiquidError)) return new TemplateLimitError(liquidLimit);
    e = e.originalError as typeof e;
  }
  return undefined;
}

/** `ParseError: tag {% if x %} not closed, line:3, col:1` → line 3, `tag {% if x %} not closed`. */
export function describeLiquidError(err: unknown, kind = 'syntax'): string {
  const limit = limitErrorOf(err);
  if (limit) return `template ${limit.message}`;
  if (err instanceof LiquidError) {
    const [line] = err.token?.getPosition?.() ?? [];
    const text = (err.originalError?.message ?? err.message).replace(/, line:\d+, col:\d+$/, '');
    return line ? `Liquid ${kind} error at line ${line}: ${text}` : `Liquid ${kind} error: ${text}`;
  }
  return `Liquid ${kind} error: ${(err as Error)?.message ?? String(err)}`;
}

/** Parses and renders a template string with the given variables, under the default limits (tests; the pool tasks cache the parse). */
export async function renderTemplate(text: string, variables: Record<string, unknown>, limits?: RenderLimits): Promise<string> {
  return renderParsed(parseTemplate(text), variables, limits);
}
