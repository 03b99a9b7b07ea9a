// Event-loop stalls of the process that serves the fuzz's requests (this one:
// the fuzz drives the app through app.inject), counted only while a request is
// in flight, so the fuzz's own work between requests (fast-check building the
// next value, a 10 MB body) is not held against the service; the first
// `warmup` requests (JIT, first compilation of schemas) are not counted either.
//
// Not monitorEventLoopDelay: it cannot be limited to those windows (its first
// sample after enable() or reset() carries a stall that ended just before, as
// tried), so a 10 ms timer samples the loop here and only lateness that lies
// wholly inside a window goes into the (perf_hooks) histogram.
//
// A stall is the event-loop thread's own CPU time between two ticks
// (process.threadCpuUsage), capped by the lateness: on a shared 2-core machine
// the scheduler can leave the thread waiting for a core for 200 ms while it
// runs nothing of ours, and that wall-clock lateness says nothing about the
// service (measured: a 200 ms busy loop got 130 ms of CPU at load 10; an idle
// 200 ms timer, 2 ms). Wall lateness is kept too, for the report.
import { createHistogram } from 'node:perf_hooks';

/** Stalls over this many ms break "one team cannot hurt another" (the contract's fuzz goal). */
export const STALL_LIMIT_MS = 200;
const TICK_MS = 10;

export class StallMeter {
  private readonly histogram = createHistogram();
  private inFlight = 0;
  private seen = 0;
  private readonly warmup: number;
  private windowStart = 0;
  private lastTick = 0;
  private lastCpuUs = 0;
  /** Longest wall-clock lateness inside a window, ms (scheduler waits included). */
  maxWallMs = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The request in flight when the longest stall over the limit ended. */
  worst: { ms: number; label: string } | undefined;

  constructor(warmup = 50) {
    this.warmup = warmup;
  }

  private static cpuUs(): number {
    const { user, system } = process.threadCpuUsage();
    return user + system;
  }

  private sample(label: string): void {
    const now = performance.now();
    const cpu = StallMeter.cpuUs();
    if (this.lastTick >= this.windowStart) {
      const wallLate = now - this.lastTick - TICK_MS;
      this.maxWallMs = Math.max(this.maxWallMs, wallLate);
      const late = Math.min(wallLate, (cpu - this.lastCpuUs) / 1000);
      this.histogram.record(Math.max(1, Math.round(late * 1000))); // µs
      if (late > STALL_LIMIT_MS && (!this.worst || late > this.worst.ms)) this.worst = { ms: late, label };
    }
    this.lastTick = now;
    this.lastCpuUs = cpu;
  }

  /** Wraps one request: its window runs from its start to its answer. */
  async around<T>(label: string, fn: () => Promise<T>): Promise<T> {
    if (this.seen++ < this.warmup) return fn();
    if (this.inFlight++ === 0) {
      this.windowStart = this.lastTick = performance.now();
      this.lastCpuUs = StallMeter.cpuUs();
      this.timer = setInterval(() => this.sample(label), TICK_MS);
    }
    try {
      return await fn();
    } finally {
      // The stall that ends with the answer, before the timer could fire.
      if (--this.inFlight === 0) {
        this.sample(label);
        clearInterval(this.timer);
      }
    }
  }

  /** Longest event-loop delay seen inside request windows, ms (0 when none). */
  maxMs(): number {
    return this.histogram.count === 0 ? 0 : this.histogram.max / 1000;
  }

  p99Ms(): number {
    return this.histogram.count === 0 ? 0 : this.histogram.percentile(99) / 1000;
  }
}
