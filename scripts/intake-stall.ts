// Measures how long a 10 MiB bulk body holds the API's event loop, with the
// JSON parsed on the event loop (JSON_POOL_THRESHOLD_BYTES above the body: the
// old behaviour) and in the untrusted pool (the default), using
// perf_hooks.monitorEventLoopDelay. Figures go into docs/security.md.
//
//   DATABASE_URL=... APP_SECRET=... node scripts/intake-stall.ts
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { closeUntrustedPool } from '../src/untrusted/pool.ts';
import { buildTestApp, makeTeam, testConfig } from '../test/helpers.ts';

const RUNS = 6;

function bodies(): Record<string, string> {
  // A: the largest legal bulk body: 1,000 contacts with ~10 KB each (few, long strings).
  const a = JSON.stringify({
    contacts: Array.from({ length: 1000 }, (_, i) => ({ email: `stall${i}@example.com`, first_name: 'F', custom_str_1: 'v'.repeat(255), tags: Array.from({ length: 90 }, (_, j) => `tag-${j}-${'t'.repeat(50)}`) })),
  });
  // B: ~100,000 small values (the value cap) filling ~10 MiB; the schema refuses it after the parse.
  const b = JSON.stringify({ contacts: [{ email: 'b@example.com' }], junk: Array.from({ length: 99_000 }, (_, i) => `${i}`.padEnd(100, 'x')) });
  return { [`1,000 contacts (${(a.length / 2 ** 20).toFixed(1)} MiB)`]: a, [`99,000 strings (${(b.length / 2 ** 20).toFixed(1)} MiB)`]: b };
}

async function measure(poolThresholdBytes: number, payload: string): Promise<{ max: number; p99: number; ms: number; status: number }> {
  const t = await buildTestApp({ config: { intake: { ...testConfig().intake, jsonPoolThresholdBytes: poolThresholdBytes } } });
  try {
    const { key } = await makeTeam(t.database.db);
    const send = () => t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload });
    await send(); // warm-up: pool thread start, JIT
    const h = monitorEventLoopDelay({ resolution: 1 });
    h.enable();
    const started = performance.now();
    let status = 0;
    for (let i = 0; i < RUNS; i++) status = (await send()).statusCode;
    const ms = (performance.now() - started) / RUNS;
    h.disable();
    return { max: h.max / 1e6, p99: h.percentile(99) / 1e6, ms, status };
  } finally {
    await t.close();
  }
}

const rows: string[] = ['| body | parse | status | event-loop delay max | p99 | request time (mean) |', '|---|---|---|---|---|---|'];
for (const [name, payload] of Object.entries(bodies())) {
  for (const [label, threshold] of [['event loop (before)', 1024 ** 3], ['pool (after)', 64 * 1024]] as const) {
    const r = await measure(threshold, payload);
    rows.push(`| ${name} | ${label} | ${r.status} | ${r.max.toFixed(1)} ms | ${r.p99.toFixed(1)} ms | ${r.ms.toFixed(0)} ms |`);
    process.stderr.write(rows.at(-1) + '\n');
  }
}
await closeUntrustedPool();
console.log(rows.join('\n'));
