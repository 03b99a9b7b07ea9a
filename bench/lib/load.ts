// Load generation with autocannon, in this (the parent) process, against a
// server in its own process (lib/server.ts).
import autocannon from 'autocannon';
import { LatencyHistogram } from './histogram.ts';
import type { ServerProcess } from './server.ts';

export type LoadOptions = {
  url: string;
  connections: number;
  /** Seconds. */
  duration: number;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  /** A response with another body counts as a mismatch. */
  expectBody?: string;
};

export type LoadResult = {
  /** Completed requests ÷ the run's duration. */
  reqPerSec: number;
  /** Latencies in ms, at µs resolution (lib/histogram.ts), of every response. */
  p50Ms: number;
  p99Ms: number;
  meanMs: number;
  maxMs: number;
  requests: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  mismatches: number;
  durationS: number;
  /** Server process CPU time over the run ÷ wall time: 1 = one core busy. Present when a server was given. */
  serverCpu?: number;
};

/** Runs autocannon; latencies also go into `latencies` when given. */
export function runLoad(opts: LoadOptions, latencies?: LatencyHistogram): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: opts.url,
        connections: opts.connections,
        duration: opts.duration,
        pipelining: 1,
        method: opts.method ?? 'GET',
        headers: opts.headers,
        body: opts.body,
        expectBody: opts.expectBody,
      },
      (err, result) => (err ? reject(err) : resolve(result)),
    );
    if (latencies) {
      instance.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) => latencies.record(ms));
    }
  });
}

/** Runs the load and summarises it, measuring the server's CPU over the run. */
export async function measure(opts: LoadOptions, server?: ServerProcess): Promise<LoadResult> {
  const cpuBefore = await server?.cpuUsage();
  const t0 = process.hrtime.bigint();
  const latencies = new LatencyHistogram();
  const r = await runLoad(opts, latencies);
  const wallUs = Number(process.hrtime.bigint() - t0) / 1000;
  const cpuAfter = await server?.cpuUsage();
  const result: LoadResult = {
    reqPerSec: r.duration > 0 ? r.requests.total / r.duration : 0,
    p50Ms: latencies.percentileMs(50),
    p99Ms: latencies.percentileMs(99),
    meanMs: latencies.meanMs(),
    maxMs: latencies.maxMs(),
    requests: r.requests.total,
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    mismatches: r.mismatches,
    durationS: r.duration,
  };
  if (cpuBefore && cpuAfter) {
    result.serverCpu = (cpuAfter.user + cpuAfter.system - cpuBefore.user - cpuBefore.system) / wallUs;
  }
  return result;
}

/** Throws unless every response was a 2xx with the expected body and there were no connection errors. */
export function assertClean(label: string, r: LoadResult): void {
  const problems = [
    r.non2xx && `${r.non2xx} non-2xx responses`,
    r.errors && `${r.errors} errors`,
    r.timeouts && `${r.timeouts} timeouts`,
    r.mismatches && `${r.mismatches} unexpected bodies`,
    r.requests === 0 && 'no completed requests',
  ].filter(Boolean);
  if (problems.length) throw new Error(`${label}: ${problems.join(', ')}`);
}
