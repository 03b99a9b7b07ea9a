// Webhook receiver for bench/webhooks.ts: answers every POST /hook with 200 at
// once and records, per request, how long after the envelope's `timestamp` it
// arrived. GET /stats returns the count and latency percentiles; POST /reset clears.
import Fastify from 'fastify';
import { serve } from '../lib/serve.ts';

await serve(async () => {
  const app = Fastify();
  let latencies: number[] = [];
  let count = 0;
  const ids = new Set<string>();
  app.post('/hook', async (request) => {
    const env = request.body as { id: string; timestamp: string };
    count++;
    ids.add(env.id);
    latencies.push(Date.now() - Date.parse(env.timestamp));
    return { ok: true };
  });
  app.get('/stats', async () => {
    const sorted = [...latencies].sort((a, b) => a - b);
    const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? null;
    return { count, unique: ids.size, p50: at(0.5), p99: at(0.99), max: sorted.at(-1) ?? null };
  });
  app.post('/reset', async () => {
    latencies = [];
    count = 0;
    ids.clear();
    return { ok: true };
  });
  return { app };
});
