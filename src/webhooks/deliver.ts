// One delivery attempt over HTTP (undici), and what follows from its outcome
// (docs/api.md, "Retries"). Redirects are never followed (a 3xx is a
// failed attempt); the connection's DNS lookup refuses non-public addresses.
import { isIP } from 'node:net';
import { Agent, request } from 'undici';
import { guardedLookup, refusalFor, type AllowList } from '../lib/net-guard.ts';
import { jitteredDelay, type RandomSource } from '../lib/jitter.ts';
import { bareHost } from './guard.ts';
import { MAX_RETRY_AFTER_S, RESPONSE_BODY_LIMIT } from './deliveries.ts';
import { signedHeaders, type SigningKeys } from './signing.ts';

export function deliveryAgent(allow: AllowList, timeoutMs: number): Agent {
  return new Agent({
    connect: { lookup: guardedLookup(allow) as never, timeout: timeoutMs },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    keepAliveTimeout: 10_000,
    // Receivers are many and slow ones must not hold everyone up: a cap per
    // origin keeps one receiver from taking every socket.
    connections: 64,
  });
}

export type AttemptOutcome = {
  at: Date;
  ok: boolean;
  response_code: number | null;
  response_body: string | null;
  error: string | null;
  duration_ms: number;
  retry_after_s: number | null;
  gone: boolean;
};

/** Parses Retry-After (seconds or an HTTP date) into seconds, or null. */
export function parseRetryAfter(value: string | string[] | undefined, now: number = Date.now()): number | null {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return null;
  if (/^\s*\d+\s*$/.test(v)) return Number(v);
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : Math.max(0, Math.ceil((t - now) / 1000));
}

async function readLimited(body: AsyncIterable<Buffer> & { destroy(): void }): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= RESPONSE_BODY_LIMIT) break; // leaving the loop destroys the stream
  }
  const buf = Buffer.concat(chunks).subarray(0, RESPONSE_BODY_LIMIT);
  // Cut on a character boundary: a partial UTF-8 sequence at the end would be U+FFFD noise.
  return buf.toString('utf8').replace(/\uFFFD+$/, '').replaceAll('\u0000', '');
}

function describe(err: unknown): string {
  const e = err as { name?: string; code?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError' || e?.code === 'UND_ERR_HEADERS_TIMEOUT' || e?.code === 'UND_ERR_BODY_TIMEOUT') {
    return 'timeout: no complete answer in time';
  }
  const msg = e?.message ?? String(err);
  return e?.code && !msg.includes(e.code) ? `${e.code}: ${msg}` : msg;
}

export async function attemptDelivery(opts: {
  agent: Agent;
  allow: AllowList;
  url: string;
  keys: SigningKeys;
  envelope: Record<string, unknown>;
  timeoutMs: number;
  userAgent: string;
}): Promise<AttemptOutcome> {
  const at = new Date();
  const started = performance.now();
  const done = (o: Partial<AttemptOutcome>): AttemptOutcome => ({
    at,
    ok: false,
    response_code: null,
    response_body: null,
    error: null,
    duration_ms: Math.round(performance.now() - started),
    retry_after_s: null,
    gone: false,
    ...o,
  });
  let target: URL;
  try {
    target = new URL(opts.url);
  } catch {
    return done({ error: 'invalid URL' });
  }
  const host = bareHost(target);
  // IP-literal hosts never go through a DNS lookup, so they are checked here.
  if (isIP(host)) {
    const why = refusalFor(opts.allow, host, host);
    if (why) return done({ error: `refused to connect to ${host}: ${why}` });
  }
  const body = JSON.stringify(opts.envelope);
  const id = String(opts.envelope.id);
  const timestamp = Math.floor(at.getTime() / 1000);
  // The attempt's whole deadline (the agent's timeouts are per phase: a body
  // dripped a byte at a time would pass them). A timer cleared when the attempt
  // ends, not AbortSignal.timeout(): its timer stays until it fires or the
  // signal is collected, and at 1,500-2,000 deliveries/s those timers and the
  // DOMException each one made on firing were about a tenth of the dispatcher
  // loop's own CPU (CPU profile of npm run bench -- webhooks).
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(new DOMException('delivery attempt timed out', 'TimeoutError')), opts.timeoutMs);
  timer.unref(); // as AbortSignal.timeout()'s: the request's socket is what keeps the process up
  try {
    const res = await request(target, {
      method: 'POST',
      dispatcher: opts.agent,
      headers: signedHeaders({ keys: opts.keys, id, body, timestamp, userAgent: opts.userAgent }),
      body,
      signal: deadline.signal,
    });
    const text = await readLimited(res.body);
    const code = res.statusCode;
    const ok = code >= 200 && code < 300;
    return done({
      ok,
      response_code: code,
      response_body: text,
      error: ok ? null : code >= 300 && code < 400 ? `redirect (${code}) not followed` : `receiver answered ${code}`,
      retry_after_s: code === 429 || code === 503 ? parseRetryAfter(res.headers['retry-after']) : null,
      gone: code === 410,
    });
  } catch (err) {
    return done({ error: describe(err) });
  } finally {
    clearTimeout(timer);
  }
}

/**
 * When the next attempt of a delivery is due after attempt number `attemptNo`
 * (1-based, within its sequence) failed, or null when that was the last one.
 * A Retry-After asking for longer than the schedule is honoured up to 6 h.
 */
export function nextAttemptAt(
  attemptNo: number,
  maxAttempts: number,
  delays: number[],
  outcome: Pick<AttemptOutcome, 'retry_after_s'>,
  now: Date = new Date(),
  jitter = 0,
  random: RandomSource = Math.random,
): Date | null {
  if (attemptNo >= maxAttempts) return null;
  const scheduled = jitteredDelay(delays[Math.min(attemptNo - 1, delays.length - 1)] ?? 0, jitter, random);
  // A receiver's Retry-After is its own spreading: it is honoured as given.
  const asked = outcome.retry_after_s === null ? 0 : Math.min(outcome.retry_after_s, MAX_RETRY_AFTER_S);
  return new Date(now.getTime() + Math.max(scheduled, asked) * 1000);
}
