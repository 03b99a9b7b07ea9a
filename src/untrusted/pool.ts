// The pool of worker threads where work on untrusted content runs: Liquid parse
// and render, link rewriting, HTML-to-text, and large JSON bodies. A team's
// template or body can cost a worker thread its time budget or its heap, never
// the event loop that answers every team's requests (docs/architecture.md and
// docs/security.md). An overrun ends that task (piscina terminates the thread and
// starts a fresh one); the caller gets an UntrustedWorkError it maps to a 422
// (create, preview) or a failed message (send).
//
// Four things keep one team's heavy work from delaying another's (measured in
// bench/isolation.ts, figures in docs/security.md):
// - the threads run at a lower CPU priority (nice 10, per thread on Linux), so
//   the event loop that answers requests gets a core first;
// - tasks wait in this module, one queue per team, and are handed to piscina
//   round-robin between teams, never more than there are threads: piscina's
//   own queue stays empty, so a team with a hundred queued renders does not
//   stand in front of another team's one;
// - a team holds at most `perTeamThreads` threads at once (default: all but
//   one), so a second team's task finds a free thread at once instead of
//   waiting out a 3-second template bomb;
// - a team's tasks use on average at most `teamCpuShare` of one core (default
//   half, after a burst of 2 s of CPU): each task's CPU time, measured in its
//   thread, is added to the team's debt, which drains at the share; while it is
//   over the burst, the team's next task waits. Without it one team's stream of
//   1 MiB bodies or templates kept a thread busy all the time, and the threads'
//   garbage collection (on V8's helper threads, which the process shares and
//   which keep their priority) took CPU from the
//   event loop. Isolation bench, all classes, attackers at nice 19, two runs
//   each, ping p99 ratio / send p99 ratio: no share x6.7, x5.5 / x4.5, x3.3;
//   a quarter x3.8, x3.2 / x3.7, x2.5; half x3.7, x5.4 / x4.4, x4.0 (noisy:
//   about 50 sends a phase). Half, not a quarter: one team's campaign renders
//   (505 e-mails/s) and inbound DSN parsing (1,242/s; 1,042 with a quarter,
//   1,187 without) stay as fast as without the share.
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { sharedNow } from './clock.ts';

export type UntrustedPoolOptions = {
  /** Worker module; tests pass their own. Default: src/pool-tasks.ts. */
  filename?: string;
  /** Threads at most (default: the machine's cores, at least 2). */
  maxThreads?: number;
  /** Each thread's V8 old-generation heap, MiB (default DEFAULT_POOL_HEAP_MIB). */
  maxOldGenerationSizeMb?: number;
  /** Wall-clock budget of one task, from when a thread begins it, ms (default 2,000). */
  budgetMs?: number;
  /** Tasks waiting for a thread at most, all teams together; past it a task is refused at once (default 1,000). */
  maxQueue?: number;
  /** Threads one team may hold at once (default: maxThreads - 1, at least 1). */
  perTeamThreads?: number;
  /** Nice increment of the threads (default 10; 0 leaves their priority alone). */
  niceIncrement?: number;
  /** A team's average share of one core for its tasks (default 0.5); 0 turns the share off. */
  teamCpuShare?: number;
  /** CPU ms a team may have used above its share before its next task waits (default 2,000). */
  teamCpuBurstMs?: number;
};

/**
 * Each thread's old-generation heap. Measured one task at a time in a thread:
 * the worst legal template (1 MiB of `{{ x }}`, 150,000 tags, checked at create
 * with its alt_content derived) fails at 96 MiB and passes at 128 since its
 * derived alt_content is parsed after the content's tree is dropped (before,
 * with both trees alive, it needed over 192); a 10 MiB bulk body, a render at
 * the 8 MiB HTML cap and a 1 MiB template of ordinary markup pass at 48.
 * 160 MiB keeps a margin over the worst; what one team can hold is one thread
 * (perTeamThreads).
 */
export const DEFAULT_POOL_HEAP_MIB = 160;

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

/**
 * How long a task handed to piscina may wait for a thread to begin it (a
 * thread's boot at low priority on a loaded machine) before it is refused as
 * overloaded. Its own budget only starts once it has begun.
 */
const START_DEADLINE_MS = 60_000;

/** A task is ended this long after it began whatever CPU it got (its budget is CPU time). */
const WALL_CEILING_MS = 60_000;

/** Tasks without a team (tests, operator tools) share this queue. */
const NO_TEAM = '';


export class UntrustedPool {
  readonly budgetMs: number;
  readonly maxThreads: number;
  readonly perTeamThreads: number;
  private readonly maxQueue: number;
  private readonly pool: Piscina;
  /** Per team, tasks waiting for a thread, in arrival order; Map order is the round-robin order. */
  private readonly waiting = new Map<string, (() => void)[]>();
  private waitingCount = 0;
  private readonly running = new Map<string, number>();
  private runningCount = 0;
  private readonly cpuShare: number;
  private readonly cpuBurstMs: number;
  /** Per team, CPU ms used above its share, as of `at` (performance.now()); it drains at cpuShare ms per ms. */
  private readonly debt = new Map<string, { ms: number; at: number }>();
  private debtTimer: NodeJS.Timeout | undefined;

  constructor(opts: UntrustedPoolOptions = {}) {
    this.budgetMs = opts.budgetMs ?? 2_000;
    this.maxThreads = opts.maxThreads ?? Math.max(2, availableParallelism());
    this.perTeamThreads = Math.max(1, Math.min(this.maxThreads, opts.perTeamThreads ?? this.maxThreads - 1));
    this.maxQueue = opts.maxQueue ?? 1_000;
    this.cpuShare = opts.teamCpuShare ?? 0.5;
    this.cpuBurstMs = opts.teamCpuBurstMs ?? 2_000;
    const maxOld = opts.maxOldGenerationSizeMb ?? DEFAULT_POOL_HEAP_MIB;
    this.pool = new Piscina({
      filename: new URL('./thread.ts', import.meta.url).href,
      workerData: { tasks: opts.filename ?? new URL('../pool-tasks.ts', import.meta.url).href },
      // Every thread is started with the pool and replaced at once when one is
      // ended (a task over its budget or heap): a task never waits for a
      // thread's boot, which took 230-310 ms on the loaded machine of the
      // isolation bench and was the worst of the victim's campaign sends
      // (send p99 481-632 ms with one thread kept, 168-255 ms with all).
      // It costs one idle thread's RSS (about 30 MiB) once the pool is used.
      minThreads: this.maxThreads,
      maxThreads: this.maxThreads,
      // Admission happens here (never more tasks than threads), so piscina's
      // queue only ever holds a task for the moment a thread is being started.
      maxQueue: this.maxThreads,
      // Per thread on Linux (piscina calls nice(2) in the thread, through
      // @napi-rs/nice): the request-serving thread keeps its priority.
      niceIncrement: opts.niceIncrement ?? 10,
      resourceLimits: { maxOldGenerationSizeMb: maxOld, maxYoungGenerationSizeMb: 32, stackSizeMb: 4 },
    });
  }

  /**
   * Runs the named export of the worker module on `input`, on behalf of `team`
   * (fair share of the threads; omit it for work of no team). Rejects with
   * UntrustedWorkError on a timeout (the thread is terminated), an out-of-memory
   * thread, or a full queue; an Error thrown by the task itself passes through
   * with its message (e.g. a Liquid syntax error). The budget counts from when
   * a thread begins the task: not the wait in the queue, nor a thread's boot.
   * `transfer`: buffers of `input` moved to the thread rather than copied
   * (they are empty here afterwards).
   */
  async run<T>(name: string, input: unknown, budgetMs = this.budgetMs, team: string = NO_TEAM, transfer?: ArrayBuffer[]): Promise<T> {
    await this.admit(team);
    // The budget starts when the thread begins the task (thread.ts sets
    // `started` and names its thread), not when it is handed over: a thread
    // still booting would otherwise spend the task's budget on its own start.
    // And it counts the thread's CPU time, not the wall clock: the threads run
    // at nice 10, and on a machine loaded past its cores a task may get a small
    // share of one; it is ended when it has used its budget of CPU, or at
    // WALL_CEILING_MS however little it got. A task no thread begins within
    // START_DEADLINE_MS is given up as overloaded.
    // One shared buffer for both views (thread.ts, Envelope): one allocation a task.
    const shared = new SharedArrayBuffer(32);
    const started = new Int32Array(shared, 0, 3);
    const startCpu = new Float64Array(shared, 16, 2);
    const abort = new AbortController();
    const timedOut = () => abort.abort(new UntrustedWorkError('timeout', `took longer than ${budgetMs} ms`));
    let timer: NodeJS.Timeout = setTimeout(
      () => abort.abort(new UntrustedWorkError('overloaded', 'no worker thread was free in time; try again shortly')),
      START_DEADLINE_MS,
    );
    let ceiling: NodeJS.Timeout | undefined;
    const begun = Atomics.waitAsync(started, 0, 0);
    const onBegun = () => {
      if (Atomics.load(started, 0) !== 1) return; // ended before it began
      clearTimeout(timer);
      // Its own timer: a thread stuck in native code answers no CPU question.
      ceiling = setTimeout(timedOut, WALL_CEILING_MS);
      const thread = this.pool.threads.find((w) => w.threadId === Atomics.load(started, 1));
      if (!thread) {
        timer = setTimeout(timedOut, budgetMs);
        return;
      }
      const cpuMs = async () => {
        const u = await thread.cpuUsage();
        return (u.user + u.system) / 1000;
      };
      // Counted from the thread's own reading at the task's start: this loop
      // may see the task begin long after it did (a busy or blocked loop), and
      // the CPU the task used meanwhile counts too. A thread's CPU time is at
      // most the wall time since the task began, so the first reading waits
      // until that has reached the budget (most tasks end before; asking a
      // thread for its CPU time is a round trip to it), and is taken at once
      // when it already has. A thread that ended (out of memory) answers
      // nothing: the catch ends the task.
      const base = startCpu[0]!;
      const check = async () => {
        const used = (await cpuMs()) - base;
        if (abort.signal.aborted || Atomics.load(started, 0) !== 1) return;
        if (used >= budgetMs) timedOut();
        else timer = setTimeout(() => void check().catch(timedOut), Math.max(budgetMs - used, 20));
      };
      const ranFor = sharedNow() - startCpu[1]!;
      if (ranFor >= budgetMs) void check().catch(timedOut);
      else timer = setTimeout(() => void check().catch(timedOut), Math.min(budgetMs, budgetMs - ranFor));
    };
    if (begun.async) void begun.value.then(onBegun);
    else onBegun();
    try {
      return (await this.pool.run({ name, input, started, startCpu }, { name: 'run', signal: abort.signal, transferList: transfer })) as T;
    } catch (err) {
      if (abort.signal.aborted && abort.signal.reason instanceof UntrustedWorkError) throw abort.signal.reason;
      throw classify(err, budgetMs);
    } finally {
      clearTimeout(timer);
      clearTimeout(ceiling);
      // Marks the task ended; settles the wait when it never began (a full or closed pool).
      const state = Atomics.exchange(started, 0, 2);
      if (state === 0) Atomics.notify(started, 0);
      // The task's CPU time, as its thread measured it; one that ended its thread
      // (budget, heap) reported none and is charged its budget.
      else if (team !== NO_TEAM && this.cpuShare > 0) {
        const reported = Atomics.load(started, 2);
        const usedMs = reported > 0 ? (reported - 1) / 1000 : budgetMs;
        this.addDebt(team, usedMs);
      }
      this.release(team);
    }
  }

  private canStart(team: string): boolean {
    return this.runningCount < this.maxThreads && (this.running.get(team) ?? 0) < this.perTeamThreads &&
      this.debtOf(team) <= this.cpuBurstMs;
  }

  /** The team's CPU ms above its share now. */
  private debtOf(team: string): number {
    const d = this.debt.get(team);
    if (!d) return 0;
    const ms = d.ms - (performance.now() - d.at) * this.cpuShare;
    if (ms > 0) return ms;
    this.debt.delete(team);
    return 0;
  }

  private addDebt(team: string, usedMs: number): void {
    this.debt.set(team, { ms: this.debtOf(team) + usedMs, at: performance.now() });
  }

  private admit(team: string): Promise<void> {
    if (!this.waiting.has(team) && this.canStart(team)) {
      this.take(team);
      return Promise.resolve();
    }
    if (this.waitingCount >= this.maxQueue) {
      return Promise.reject(new UntrustedWorkError('overloaded', 'too much work is waiting; try again shortly'));
    }
    return new Promise<void>((resolve) => {
      let queue = this.waiting.get(team);
      if (!queue) this.waiting.set(team, (queue = []));
      queue.push(resolve);
      this.waitingCount++;
      // Held back by its CPU share alone, no task's end would wake it: dispatch sets the timer.
      if (!this.debtTimer) this.dispatch();
    });
  }

  private take(team: string): void {
    this.running.set(team, (this.running.get(team) ?? 0) + 1);
    this.runningCount++;
  }

  private release(team: string): void {
    const left = (this.running.get(team) ?? 1) - 1;
    if (left <= 0) this.running.delete(team);
    else this.running.set(team, left);
    this.runningCount--;
    this.dispatch();
  }

  /** Hands free threads to waiting teams, one task per team per turn, oldest turn first. */
  private dispatch(): void {
    clearTimeout(this.debtTimer);
    this.debtTimer = undefined;
    let progressed = true;
    while (progressed && this.runningCount < this.maxThreads && this.waitingCount > 0) {
      progressed = false;
      for (const [team, queue] of this.waiting) {
        if (!this.canStart(team)) continue;
        const next = queue.shift()!;
        this.waitingCount--;
        // Served: the team goes to the back of the round.
        this.waiting.delete(team);
        if (queue.length > 0) this.waiting.set(team, queue);
        this.take(team);
        next();
        progressed = true;
        break;
      }
    }
    // A team held back only by its CPU share gets a turn once its debt is back under the burst.
    if (this.runningCount < this.maxThreads && this.waitingCount > 0) {
      let soonest = Infinity;
      for (const team of this.waiting.keys()) {
        const over = this.debtOf(team) - this.cpuBurstMs;
        if (over > 0) soonest = Math.min(soonest, over / this.cpuShare);
      }
      if (soonest < Infinity) this.debtTimer = setTimeout(() => this.dispatch(), Math.ceil(soonest) + 1);
    }
  }

  /** Threads now running (for tests and metrics). */
  get threadCount(): number {
    return this.pool.threads.length;
  }

  /** Tasks now running and waiting, per team (tests and metrics). */
  load(team: string = NO_TEAM): { running: number; waiting: number } {
    return { running: this.running.get(team) ?? 0, waiting: this.waiting.get(team)?.length ?? 0 };
  }

  async close(): Promise<void> {
    clearTimeout(this.debtTimer);
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
