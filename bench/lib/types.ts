// The contract between bench/run.ts and a benchmark module bench/<name>.ts,
// which exports `async function run(opts: BenchOptions): Promise<void>`.
import type { BenchPostgres } from './postgres.ts';

export type BenchOptions = {
  /** Benchmark name (the module's file name without .ts). */
  name: string;
  /** Seconds of measured load per run (--duration, default 10). */
  duration: number;
  /** Concurrent connections of the load generator (--connections, default 50). */
  connections: number;
  /** Benchmark-specific options (BENCH_FLAGS in run.ts): positive integers, undefined when not given. */
  flags: Readonly<Record<string, number | undefined>>;
  /** Benchmark-specific text options (TEXT_FLAGS in run.ts), undefined when not given. */
  text: Readonly<Record<string, string | undefined>>;
  /** Benchmark-specific switches (SWITCH_FLAGS in run.ts): true when given. */
  switches: Readonly<Record<string, boolean | undefined>>;
  /**
   * The PostgreSQL server to benchmark against, started on first call and
   * shared by the benchmarks of one `npm run bench`: the one in DATABASE_URL,
   * else an embedded one in a temporary directory. Each benchmark should make
   * its own database on it with createDatabase() (dropped at the end).
   */
  postgres(): Promise<BenchPostgres>;
  /** Registers cleanup to run when this benchmark ends, even on failure or Ctrl-C (last in, first out). */
  defer(fn: () => unknown): void;
  /** Progress to stderr, so that stdout holds only the results. */
  log: (msg: string) => void;
};

export type BenchModule = { run(opts: BenchOptions): Promise<void> };
