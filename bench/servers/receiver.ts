// Webhook receiver for bench/webhooks.ts: POST /hook/<webhook id> verifies the
// X-FY-Signature of every request against that webhook's secret (given in the
// params) over the raw body, answers 200 (401 on a bad signature), and records
// how long after the envelope's `timestamp` it arrived. GET /stats returns
// counts and latency percentiles; POST /reset clears them.
import { createHmac, timingSafeEqual } from 'node:crypto';
import Fastify from 'fastify';
import { serve } from '../lib/serve.ts';

export type ReceiverParams = { secrets: Record<string, string> };

await serve<ReceiverParams>(async ({ secrets }) => {
  const app = Fastify();
  let latencies: number[] = [];
  let count = 0;
  let bad = 0;
  const ids = new Set<string>();
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.post<{ Params: { wid: string } }>('/hook/:wid', async (request, reply) => {
    const raw = request.body as Buffer;
    const secret = secrets[request.params.wid] ?? '';
    const header = String(request.headers['x-fy-signature'] ?? '');
    const parts = Object.fromEntries(header.split(',').map((p) => p.trim().split('=') as [string, string]));
    const expected = createHmac('sha256', secret).update(`${parts.t}.`).update(raw).digest();
    const given = Buffer.from(parts.v1 ?? '', 'hex');
    count++;
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      bad++;
      return reply.code(401).send({ ok: false });
    }
    const env = JSON.parse(raw.toString('utf8')) as { id: string; timestamp: string };
    ids.add(env.id);
    latencies.push(Date.now() - Date.parse(env.timestamp));
    return { ok: true };
  });
  app.get('/stats', async () => {
    const sorted = [...latencies].sort((a, b) => a - b);
    const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? null;
    return { count, bad, unique: ids.size, p50: at(0.5), p99: at(0.99), max: sorted.at(-1) ?? null };
  });
  app.post('/reset', async () => {
    latencies = [];
    count = 0;
    bad = 0;
    ids.clear();
    return { ok: true };
  });
  return { app };
});
