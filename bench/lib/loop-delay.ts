// Event-loop delay as the benches report it. perf_hooks.monitorEventLoopDelay
// records the time between two runs of its own timer, the timer's interval
// included: an idle loop sampled every 10 ms reads 10 ms (checked: p50 9.8,
// min 9.2 on an idle process). Read raw, the figure of a quiet service is
// mostly the resolution and a hostile ÷ quiet ratio of it means little. These
// figures subtract the resolution, so an idle loop reads about 0 and a 200 ms
// stall about 200.
import { monitorEventLoopDelay } from 'node:perf_hooks';

export type LoopDelay = { p50: number; p99: number; max: number; mean: number; count: number };

/** Milliseconds of delay past the resolution; enabled at once, read with read(). */
export function loopDelayMeter(resolutionMs = 10) {
  const h = monitorEventLoopDelay({ resolution: resolutionMs });
  h.enable();
  const past = (ns: number) => (Number.isFinite(ns) ? Math.max(0, ns / 1e6 - resolutionMs) : 0);
  return {
    read: (): LoopDelay => ({
      p50: past(h.percentile(50)),
      p99: past(h.percentile(99)),
      max: past(h.max),
      mean: past(h.mean),
      count: h.count,
    }),
    reset: () => h.reset(),
    stop: () => h.disable(),
  };
}
