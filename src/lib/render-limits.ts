// Hard caps on what one template may cost. They hold wherever a template is
// parsed or rendered (template create, dashboard preview, campaign and
// transactional sends), because they are enforced inside the render engine
// (templates/render.ts) and the pool tasks (templates/render-tasks.ts), not by
// the callers. docs/security.md lists them with their settings.

/** Template `content` and `alt_content` at most (the contract: 1 MiB), in characters. */
export const TEMPLATE_MAX_CHARS = 1024 * 1024;
/** Liquid blocks (`if`, `for`, `capture`, …) nested at most; deeper nesting would only serve to exhaust the parser's stack. */
export const LIQUID_MAX_NESTING = 100;
/**
 * Liquid parts per template field at most: each tag and output counts one, and
 * so does each name, value, filter, operator and punctuation mark inside it
 * (`{{ contact.first_name | upcase }}` is 6). The parsed tree costs 200-450
 * bytes of heap per part (1 MiB of `{{ x }}`, 300,000 parts, held 101 MiB;
 * 1 MiB of `{% liquid %}` lines 123 MiB), so the cap, not the 1 MiB size,
 * bounds what one parse holds: about 20 MiB. A typical template uses tens to
 * hundreds; a newsletter of 500 products with ten outputs each about 35,000.
 */
export const LIQUID_MAX_PARTS = 50_000;
/**
 * liquidjs's own allocation counter (memoryLimit: characters of strings built
 * by filters, elements of ranges and arrays) per render. Ten million units
 * keeps the worst case (a range of 10M numbers, about 80 MB) inside a pool
 * thread's heap; the output and loop caps below stop realistic abuse sooner.
 */
export const LIQUID_MEMORY_UNITS = 10_000_000;

export type RenderLimits = {
  /** Time one template field may take to parse, measured as the pool thread's CPU time at create; also bounds a cache miss at send, ms. */
  parseBudgetMs: number;
  /** Wall-clock budget of rendering one message (subject, HTML, text share it), measured in the pool thread, ms. */
  renderBudgetMs: number;
  /** Characters one Liquid render may write, text captured by `capture` and values stored by `assign` included. */
  maxOutputChars: number;
  /** Characters of a message's final HTML, after link rewriting, pixel and honeypot. */
  maxHtmlChars: number;
  /** Loop iterations (`for`, `tablerow`) per render, nested loops multiplied; a larger range is refused before it is built. */
  maxLoopIterations: number;
};

export const DEFAULT_RENDER_LIMITS: RenderLimits = {
  // A 1 MiB template of nothing but tags (140,000 of them) parses in 0.5-2 s and
  // renders in about 1 s on a busy 2-core machine; a typical one takes milliseconds.
  parseBudgetMs: 3_000,
  renderBudgetMs: 3_000,
  maxOutputChars: 4 * 1024 * 1024,
  maxHtmlChars: 8 * 1024 * 1024,
  maxLoopIterations: 100_000,
};

/** The environment variable of each setting, with the range it must be in. */
export const RENDER_LIMIT_SETTINGS: Record<keyof RenderLimits, { env: string; min: number; max: number }> = {
  parseBudgetMs: { env: 'RENDER_PARSE_BUDGET_MS', min: 100, max: 60_000 },
  renderBudgetMs: { env: 'RENDER_BUDGET_MS', min: 100, max: 60_000 },
  maxOutputChars: { env: 'RENDER_MAX_OUTPUT_CHARS', min: 1024, max: 64 * 1024 * 1024 },
  maxHtmlChars: { env: 'RENDER_MAX_HTML_CHARS', min: 1024, max: 64 * 1024 * 1024 },
  maxLoopIterations: { env: 'RENDER_MAX_LOOP_ITERATIONS', min: 1, max: 10_000_000 },
};

/** Reads the settings; a bad value throws with the variable's name (config.ts turns it into a start-up error). */
export function renderLimitsFromEnv(env: NodeJS.ProcessEnv): RenderLimits {
  const out = { ...DEFAULT_RENDER_LIMITS };
  for (const [key, { env: name, min, max }] of Object.entries(RENDER_LIMIT_SETTINGS) as [keyof RenderLimits, (typeof RENDER_LIMIT_SETTINGS)[keyof RenderLimits]][]) {
    const raw = env[name]?.trim();
    if (raw === undefined || raw === '') continue;
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || n < min || n > max) throw new RangeError(`${name} must be a whole number between ${min} and ${max}, got "${raw}"`);
    out[key] = n;
  }
  return out;
}
