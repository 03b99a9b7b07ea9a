// Plain-text tables for benchmark results (stdout).

export type Align = 'left' | 'right';

/** Renders rows under a header, columns padded; numbers right-aligned by default. */
export function table(header: string[], rows: (string | number)[][], align?: Align[]): string {
  const cells = [header, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? fmt(c) : c)))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  const aligns = align ?? header.map((_, i) => (rows.some((r) => typeof r[i] === 'number') ? 'right' : 'left'));
  const line = (r: string[]) =>
    r.map((c, i) => (aligns[i] === 'right' ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ').trimEnd();
  return [line(cells[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.slice(1).map(line)].join('\n');
}

/** Thousands separators for big numbers, 2 decimals for small ones. */
export function fmt(n: number, decimals?: number): string {
  if (!Number.isFinite(n)) return String(n);
  const d = decimals ?? (Math.abs(n) >= 100 ? 0 : 2);
  return n.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
}

/** Rounds for JSON output. */
export function round(n: number, decimals = 3): number {
  const f = 10 ** decimals;
  return Math.round(n * f) / f;
}
