// Retry jitter (decisions of the contract: the fixed schedule is the centre,
// ± 20 %, drawn uniformly). Without it every worker that saw one endpoint or
// SMTP server fail retries it in the same second, and a recovering receiver
// gets the whole backlog at once.

/** A source of uniform numbers in [0, 1); Math.random in production, a fixed sequence in tests. */
export type RandomSource = () => number;

/**
 * `delayS` moved uniformly within ± `spread` of itself (spread 0.2 → [0.8, 1.2] × delay).
 * A spread of 0 gives the schedule exactly.
 */
export function jitteredDelay(delayS: number, spread: number, random: RandomSource = Math.random): number {
  if (spread <= 0 || delayS <= 0) return delayS;
  return delayS * (1 - spread + 2 * spread * random());
}
