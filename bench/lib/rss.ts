// Resident memory of benchmarked processes, read from /proc (Linux; NaN
// elsewhere): VmRSS, the whole process with its worker threads.
import { readFileSync } from 'node:fs';

/** A process's resident set now, MiB; NaN when it is gone or there is no /proc. */
export function vmRssMiB(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

/**
 * Samples each process's VmRSS every `everyMs` until the returned function is
 * called, which answers the largest value seen per process, in MiB (NaN for a
 * process never read).
 */
export function rssMaxMeter(pids: number[], everyMs = 100): () => number[] {
  const max = pids.map(() => NaN);
  const sample = () =>
    pids.forEach((pid, i) => {
      const v = vmRssMiB(pid);
      if (!Number.isNaN(v)) max[i] = Number.isNaN(max[i]!) ? v : Math.max(max[i]!, v);
    });
  sample();
  const timer = setInterval(sample, everyMs);
  return () => {
    clearInterval(timer);
    sample();
    return [...max];
  };
}

/** Issue 16's goal for each API and worker process under load. */
export const GOAL_RSS_MIB = 200;

/** Figures of a meter for a table cell: "231" or "231, 228". */
export const mibs = (values: number[]) => values.map((v) => (Number.isNaN(v) ? 'n/a' : String(Math.round(v)))).join(', ');
