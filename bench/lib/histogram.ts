// Latency histogram with microsecond resolution (autocannon's own has 1 ms,
// too coarse when a ping takes well under a millisecond). Log-linear buckets
// like HdrHistogram's: exact below 1,024 µs, then 512 buckets per power of two
// (under 0.2% error), so memory stays fixed (~46 KB) however long the run.
const SUB = 1024;
const HALF = SUB / 2;
const MAX_US = 2 ** 31 - 1; // ~36 minutes
const BUCKETS = SUB + 22 * HALF;

function indexOf(us: number): number {
  if (us < SUB) return us;
  const shift = 31 - Math.clz32(us) - 9; // us >>> shift is in [512, 1023]
  return SUB + (shift - 1) * HALF + ((us >>> shift) - HALF);
}

/** Middle of the bucket's range, in µs. */
function valueOf(index: number): number {
  if (index < SUB) return index;
  const shift = Math.floor((index - SUB) / HALF) + 1;
  const mantissa = ((index - SUB) % HALF) + HALF;
  return mantissa * 2 ** shift + (2 ** shift - 1) / 2;
}

export class LatencyHistogram {
  private readonly counts = new Float64Array(BUCKETS);
  count = 0;
  private sumUs = 0;
  private maxUs = 0;

  /** Records one latency given in milliseconds (fractional). */
  record(ms: number): void {
    const us = Math.min(MAX_US, Math.max(0, Math.round(ms * 1000)));
    this.counts[indexOf(us)]++;
    this.count++;
    this.sumUs += us;
    if (us > this.maxUs) this.maxUs = us;
  }

  /** The latency (ms) at or below which p percent of the recorded ones fall. */
  percentileMs(p: number): number {
    if (this.count === 0) return 0;
    const target = Math.max(1, Math.ceil((p / 100) * this.count));
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.counts[i];
      if (seen >= target) return Math.min(valueOf(i), this.maxUs) / 1000;
    }
    return this.maxUs / 1000;
  }

  meanMs(): number {
    return this.count ? this.sumUs / this.count / 1000 : 0;
  }

  maxMs(): number {
    return this.maxUs / 1000;
  }
}
