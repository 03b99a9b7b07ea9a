// Just the part of autocannon's API the benchmarks use (the package ships no types).
declare module 'autocannon' {
  namespace autocannon {
    type Histogram = {
      average: number;
      mean: number;
      stddev: number;
      min: number;
      max: number;
      total: number;
      p2_5: number;
      p50: number;
      p75: number;
      p90: number;
      p97_5: number;
      p99: number;
      p99_9: number;
      p99_99: number;
      p99_999: number;
    };

    type Options = {
      url: string;
      connections?: number;
      /** Seconds. */
      duration?: number;
      pipelining?: number;
      workers?: number;
      method?: string;
      headers?: Record<string, string>;
      body?: string | Buffer;
      /** Counts a response whose body differs as a mismatch. */
      expectBody?: string;
      /** Seconds. */
      timeout?: number;
      title?: string;
    };

    type Result = {
      title?: string;
      url: string;
      connections: number;
      pipelining: number;
      /** Seconds. */
      duration: number;
      samples: number;
      start: Date;
      finish: Date;
      errors: number;
      timeouts: number;
      mismatches: number;
      non2xx: number;
      resets: number;
      '1xx': number;
      '2xx': number;
      '3xx': number;
      '4xx': number;
      '5xx': number;
      statusCodeStats: Record<string, { count: number }>;
      /** Milliseconds (whole: autocannon's histogram has 1 ms resolution). */
      latency: Histogram & { totalCount: number };
      /** Completed requests per one-second sample. */
      requests: Histogram & { sent: number };
      /** Bytes per one-second sample. */
      throughput: Histogram;
    };

    type Instance = import('node:events').EventEmitter & { stop(): void };
  }

  function autocannon(opts: autocannon.Options, cb: (err: Error | null, result: autocannon.Result) => void): autocannon.Instance;

  export default autocannon;
}
