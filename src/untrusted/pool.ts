// The pool of worker threads where work on untrusted content runs: Liquid parse
// and render, link rewriting, HTML-to-text, and large JSON bodies. A team's
// template or body can cost a worker thread its time budget or its heap, never
// the event loop that answers every team's requests (DESIGN.md, "Untrusted work
// is bounded"). An overrun ends that task (piscina terminates the thread and
// starts a fresh one); the caller gets an UntrustedWorkError it maps to a 422
// (create, preview) or a failed message (send).
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';

export type UntrustedPoolOptions = {
  /** Worker module; tests pass their own. Default: src/pool-tasks.ts. */
  filename?: string;
  /** Threads at most (default: the machine's cores, at least 2). */
  maxThreads?: number;
  /** Each thread's V8 old-generation heap, MiB (default 256). */
  maxOldGenerationSizeMb?: number;
  /** Wall-clock budget of one task, ms (default 2,000). */
  budgetMs?: number;
  /** Tasks waiting for a thread at most; past it a task is refused at once (default 1,000). */
  maxQueue?: number;
};

export type UntrustedWorkReason = 'timeout' | 'memory' | 'overloaded' | 'crashed';

/** A task that ran over its budget, its heap, or could not be queued. Never a bug of the caller's input handling. */
export class UntrustedWorkError extends Error {
  readonly reason: UntrustedWorkReason;
  constructor(reason: UntrustedWorkReason, message: string) {
    super(message);
    this.name = 'UntrustedWorkError';
    this.reason = reason;
  }
}

export class UntrustedPool {
  readonly budgetMs: number;
  private readonly pool: Piscina;

  constructor(opts: UntrustedPoolOptions = {}) {
    this.budgetMs = opts.budgetMs ?? 2_000;
    const maxOld = opts.maxOldGenerationSizeMb ?? 256;
    this.pool = new Piscina({
      filename: opts.filename ?? new URL('../pool-tasks.ts', import.meta.url).href,
      minThreads: 1,
      maxThreads: opts.maxThreads ?? Math.max(2, availableParallelism()),
      maxQueue: opts.maxQueue ?? 1_000,
      // An idle pool shrinks back to one thread: RSS of an idle service stays low.
      idleTimeout: 30_000,
      resourceLimits: { maxOldGenerationSizeMb: maxOld, maxYoungGenerationSizeMb: 32, stackSizeMb: 4 },
    });
  }

  /**
   * Runs the named export of the worker module on `input`. Rejects with
   * UntrustedWorkError on a timeout (the thread is terminated), an out-of-memory
   * thread, or a full queue; an Error thrown by the task itself passes through
   * with its message (e.g. a Liquid syntax error).
   */
  async run<T>(name: string, input: unknown, budgetMs = this.budgetMs): Promise<T> {
    const signal = AbortSignal.timeout(budgetMs);
    try {
      return (await this.pool.run(input, { name, signal })) as T;
    } catch (err) {
      throw classify(err, budgetMs);
    }
  }

  /** Threads now running (for tests and metrics). */
  get threadCount(): number {
    return this.pool.threads.length;
  }

  async close(): Promise<void> {
    await this.pool.close({ force: true });
  }
}

function classify(err: unknown, budgetMs: number): unknown {
  const e = err as (Error & { code?: string }) | undefined;
  if (!e || typeof e !== 'object') return err;
  if (e.name === 'AbortError' || e.name === 'TimeoutError' || e.code === 'ABORT_ERR') {
    return new UntrustedWorkError('timeout', `took longer than ${budgetMs} ms`);
  }
  if (e.code === 'ERR_WORKER_OUT_OF_MEMORY') return new UntrustedWorkError('memory', 'used more memory than allowed');
  if (/queue is full/i.test(e.message ?? '')) return new UntrustedWorkError('overloaded', 'too much work is waiting; try again shortly');
  if (e.code === 'ERR_WORKER_INIT_FAILED' || /worker exited/i.test(e.message ?? '')) {
    return new UntrustedWorkError('crashed', 'the worker stopped unexpectedly');
  }
  return err;
}

// One pool per process, shared by the API and the worker when both run in it.
let shared: UntrustedPool | undefined;

/** The process's pool, made on first use. */
export function untrustedPool(): UntrustedPool {
  shared ??= new UntrustedPool();
  return shared;
}

/** Ends the process's pool (graceful shutdown; tests' teardown). */
export async function closeUntrustedPool(): Promise<void> {
  const pool = shared;
  shared = undefined;
  await pool?.close();
}
