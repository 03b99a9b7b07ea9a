import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../src/config.ts';
import { jitteredDelay } from '../../src/lib/jitter.ts';
import { nextAttemptAt } from '../../src/webhooks/deliver.ts';

/** A deterministic uniform source (mulberry32), so a failure replays the same draws. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test('the default configuration jitters retries by ± 20 %', () => {
  assert.equal(loadConfig({}).retryJitter, 0.2);
  assert.equal(loadConfig({ RETRY_JITTER_PERCENT: '0' }).retryJitter, 0);
  assert.throws(() => loadConfig({ RETRY_JITTER_PERCENT: '80' }), /RETRY_JITTER_PERCENT/);
});

test('webhook retries: every draw within [0.8, 1.2] × the schedule, spread over the range', () => {
  const delays = [30, 120, 600, 1800, 7200, 21600];
  const random = seeded(42);
  const now = new Date('2026-01-01T00:00:00Z');
  for (let attempt = 1; attempt <= 6; attempt++) {
    const want = delays[attempt - 1]!;
    const waits: number[] = [];
    for (let i = 0; i < 2000; i++) {
      const at = nextAttemptAt(attempt, 7, delays, { retry_after_s: null }, now, 0.2, random)!;
      waits.push((at.getTime() - now.getTime()) / 1000);
    }
    assert.ok(waits.every((w) => w >= want * 0.8 && w <= want * 1.2), `attempt ${attempt}: outside [0.8, 1.2] × ${want}`);
    assert.ok(new Set(waits).size > 1000, 'not all equal');
    // Uniform: each fifth of the range gets roughly a fifth of the draws.
    const fifths = [0, 0, 0, 0, 0];
    for (const w of waits) fifths[Math.min(4, Math.floor(((w / want - 0.8) / 0.4) * 5))]!++;
    for (const f of fifths) assert.ok(f > 300 && f < 500, `fifths ${fifths.join(',')}`);
  }
  // The last attempt schedules nothing, jitter or not.
  assert.equal(nextAttemptAt(7, 7, delays, { retry_after_s: null }, now, 0.2, random), null);
});

test('the range ends are reached by the extreme draws, and a Retry-After is honoured as given', () => {
  const now = new Date(0);
  assert.equal(nextAttemptAt(1, 7, [100], { retry_after_s: null }, now, 0.2, () => 0)!.getTime(), 80_000);
  assert.ok(nextAttemptAt(1, 7, [100], { retry_after_s: null }, now, 0.2, () => 0.999999)!.getTime() <= 120_000);
  assert.equal(nextAttemptAt(1, 7, [100], { retry_after_s: 500 }, now, 0.2, () => 0)!.getTime(), 500_000);
});

test('SMTP retries use the same draw: within bounds, not all equal; spread 0 gives the schedule', () => {
  const random = seeded(7);
  const waits = Array.from({ length: 1000 }, () => jitteredDelay(300, 0.2, random));
  assert.ok(waits.every((w) => w >= 240 && w <= 360));
  assert.ok(new Set(waits).size > 500);
  assert.equal(jitteredDelay(300, 0, random), 300);
  assert.equal(jitteredDelay(0, 0.2, random), 0);
});
