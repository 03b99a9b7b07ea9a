// CPU accounting for "where does the time go": the machine as a whole and the
// benchmarked PostgreSQL's processes when it is local, read from /proc (Linux;
// undefined elsewhere).
// Used next to process.cpuUsage() (this process) and ServerProcess.cpuUsage()
// (a benchmark server) to split a run's CPU time between load generator, app
// and database.
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's times (USER_HZ: 100 on every Linux build). */
const TICKS = 100;

/** Fields of /proc/<pid>/stat after "(comm)", 0-based: state is 0, ppid 1, utime 11 ... cstime 14. */
function statFields(text: string): { comm: string; fields: string[] } | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  return { comm: text.slice(open + 1, close), fields: text.slice(close + 2).split(' ') };
}

/** User plus system CPU seconds of a /proc stat line's fields. */
const cpuSecondsOf = (fields: string[]): number => (Number(fields[11]) + Number(fields[12])) / TICKS;

function readStat(pid: number): { comm: string; fields: string[] } | undefined {
  try {
    return statFields(readFileSync(`/proc/${pid}/stat`, 'latin1'));
  } catch {
    return undefined; // gone, or no /proc
  }
}

/**
 * The postmaster's pid of the PostgreSQL whose backend has this pid (from
 * `SELECT pg_backend_pid()`), when that server runs on this machine, else undefined.
 */
export function localPostmaster(backendPid: number): number | undefined {
  const backend = readStat(backendPid);
  if (backend?.comm !== 'postgres') return undefined;
  const ppid = Number(backend.fields[1]);
  return readStat(ppid)?.comm === 'postgres' ? ppid : undefined;
}

/**
 * CPU seconds used so far by a postmaster and its children (backends,
 * checkpointer, WAL writer, autovacuum...), including exited backends: their
 * time is in the postmaster's cutime/cstime once it has reaped them.
 */
export function postgresCpuSeconds(postmaster: number): number | undefined {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return undefined;
  }
  let ticks = 0;
  for (const pid of pids) {
    const s = readStat(Number(pid));
    if (!s || (Number(pid) !== postmaster && Number(s.fields[1]) !== postmaster)) continue;
    for (let i = 11; i <= 14; i++) ticks += Number(s.fields[i]) || 0;
  }
  return ticks / TICKS;
}

/** CPU seconds (user + system, all its threads) used so far by one live process; undefined when gone or without /proc. */
export function processCpuSeconds(pid: number): number | undefined {
  const s = readStat(pid);
  return s ? cpuSecondsOf(s.fields) : undefined;
}

/**
 * CPU seconds used so far by each live thread of a process, by thread id, with
 * its name (/proc/<pid>/task/<tid>/comm: Node names its threads `MainThread`,
 * `V8Worker` for V8's platform threads (concurrent and parallel GC,
 * compilation: shared by every isolate of the process, pool threads
 * included), `WorkerThread` for worker_threads, `libuv-worker` for the libuv
 * pool). Undefined when the process is gone or without /proc.
 */
export function threadCpuSeconds(pid: number): Map<string, { name: string; seconds: number }> | undefined {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return undefined;
  }
  const out = new Map<string, { name: string; seconds: number }>();
  for (const tid of tids) {
    let s;
    try {
      s = statFields(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'latin1'));
    } catch {
      continue; // ended meanwhile
    }
    if (s) out.set(tid, { name: s.comm, seconds: cpuSecondsOf(s.fields) });
  }
  return out;
}

/**
 * Starts measuring one process's threads; the reading is the CPU seconds used
 * since, summed per thread name, by the threads alive at the reading (one that
 * started meanwhile counts from its start). A thread that ended meanwhile (a
 * pool thread replaced after an overrun) is not in it: its time is only in the
 * process's total. Undefined when the process is gone or without /proc.
 */
export function threadCpuMeter(pid: number): () => Map<string, number> | undefined {
  const start = threadCpuSeconds(pid);
  return () => {
    const now = threadCpuSeconds(pid);
    if (!now || !start) return undefined;
    const out = new Map<string, number>();
    for (const [tid, t] of now) out.set(t.name, (out.get(t.name) ?? 0) + t.seconds - (start.get(tid)?.seconds ?? 0));
    return out;
  };
}

export type CpuSpent = { processes: (number | undefined)[]; postgres?: number; machine?: number };

/**
 * Starts measuring and returns a reading of the CPU seconds spent since: by
 * each process in `pids` (all its threads), by PostgreSQL's processes when
 * `postmaster` is given, and by the machine (busy). Undefined where /proc has
 * no answer (a process gone, not Linux).
 */
export function cpuMeter(pids: number[], postmaster?: number): () => CpuSpent {
  const read = (): CpuSpent => ({
    processes: pids.map(processCpuSeconds),
    postgres: postmaster === undefined ? undefined : postgresCpuSeconds(postmaster),
    machine: machineCpu()?.busy,
  });
  const diff = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? undefined : a - b);
  const start = read();
  return () => {
    const now = read();
    return {
      processes: now.processes.map((x, i) => diff(x, start.processes[i])),
      postgres: diff(now.postgres, start.postgres),
      machine: diff(now.machine, start.machine),
    };
  };
}

export type MachineCpu = { busy: number; total: number };

/** Machine-wide CPU seconds (all cores) so far from /proc/stat: busy (not idle or iowait) and total. */
export function machineCpu(): MachineCpu | undefined {
  try {
    const line = readFileSync('/proc/stat', 'latin1').split('\n', 1)[0];
    if (!line.startsWith('cpu ')) return undefined;
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    const v = line.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = v.reduce((a, b) => a + b, 0);
    return { busy: (total - v[3] - v[4]) / TICKS, total: total / TICKS };
  } catch {
    return undefined;
  }
}
