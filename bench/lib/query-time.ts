// Where the database time goes, seen from the client: wall time per statement
// kind of every query this process sends through `pg` (ours, Kysely's and
// graphile-worker's alike), including waits for locks and for the server. A
// statement's kind is its text with whitespace collapsed, cut at 70 characters.
// pg_stat_statements would see server time only, and needs a preloaded
// library a shared server may not have.
import pg from 'pg';

type Totals = Map<string, { ms: number; calls: number }>;

let totals: Totals | null = null;
let installed = false;

function kindOf(text: unknown): string {
  const inner = typeof text === 'object' && text !== null ? (text as { text?: unknown }).text : undefined;
  const s = typeof text === 'string' ? text : typeof inner === 'string' ? inner : '';
  return s.replace(/\s+/g, ' ').trim().slice(0, 70);
}

function install(): void {
  if (installed) return;
  installed = true;
  // oxlint-disable-next-line typescript/unbound-method -- called below with .apply(this), bound to its client
  const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  (pg.Client.prototype as { query: unknown }).query = function (this: pg.Client, ...args: unknown[]) {
    if (!totals) return original.apply(this, args);
    const into = totals;
    const kind = kindOf(args[0]);
    const t0 = performance.now();
    const done = () => {
      const e = into.get(kind) ?? { ms: 0, calls: 0 };
      e.ms += performance.now() - t0;
      e.calls++;
      into.set(kind, e);
    };
    // pg.Pool#query passes a callback; Kysely and graphile-worker use the promise.
    const last = args.length - 1;
    if (typeof args[last] === 'function') {
      const cb = args[last] as (...r: unknown[]) => void;
      args[last] = (...r: unknown[]) => (done(), cb(...r));
    }
    const result = original.apply(this, args);
    if (result instanceof Promise) result.then(done, done);
    return result;
  };
}

/** Starts counting (from zero); returns a function that stops and gives the totals, largest first. */
export function timeQueries(): () => { kind: string; ms: number; calls: number }[] {
  install();
  const mine: Totals = new Map();
  totals = mine;
  return () => {
    if (totals === mine) totals = null;
    return [...mine].map(([kind, v]) => ({ kind, ...v })).sort((a, b) => b.ms - a.ms);
  };
}
