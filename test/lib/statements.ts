// The statements a piece of code sends, captured at pg.Client#query: every
// pooled client calls the prototype's method at each call (src/db/pool.ts), so
// a wrapper installed here sees all of them, prepared or not.
import pg from 'pg';

/** `name`: the prepared statement's name when it was sent as one (src/db/pool.ts, PREPARED). */
export type Sent = { text: string; values: unknown[]; name?: string };

/** Runs `fn` and returns the statements it sent whose text matches `pattern`, with their parameters. */
export async function captured(pattern: RegExp, fn: () => Promise<unknown>): Promise<Sent[]> {
  const seen: Sent[] = [];
  // oxlint-disable-next-line typescript/unbound-method -- restored below, called with .apply(this)
  const original = pg.Client.prototype.query;
  (pg.Client.prototype as { query: unknown }).query = function (this: pg.Client, ...args: unknown[]) {
    const [config, values] = args as [string | { text: string; values?: unknown[] }, unknown[] | undefined];
    const text = typeof config === 'string' ? config : config?.text;
    if (typeof text === 'string' && pattern.test(text)) {
      const name = typeof config === 'string' ? undefined : (config as { name?: string }).name;
      seen.push({ text, values: (typeof config === 'string' ? values : config.values ?? values) ?? [], ...(name ? { name } : {}) });
    }
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  };
  try {
    await fn();
  } finally {
    pg.Client.prototype.query = original;
  }
  return seen;
}
