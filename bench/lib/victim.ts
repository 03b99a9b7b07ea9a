// The victim team's load in bench/isolation.ts, the same in the quiet and the
// hostile phase: GET /public/v1/ping at a fixed rate and lead.created events
// (each sends one e-mail through B's campaign) at a low fixed rate. Open loop:
// each request starts on schedule whether or not earlier ones have answered,
// so a stalled service shows as latency (a closed loop would just send less).
import { sql } from 'kysely';
import type { Db } from '../../src/db/pool.ts';
import type { Arrival } from '../servers/smtp-sink.ts';
import { LatencyHistogram } from './histogram.ts';

export type VictimPhase = {
  ping: LatencyHistogram;
  pingSent: number;
  /** Answered 200. */
  pingOk: number;
  /** No answer within the timeout (recorded in `ping` at the timeout). */
  pingTimeouts: number;
  /** Other answers and connection errors, by status or error code. */
  pingOther: Record<string, number>;
  /** Accepted events: event id → when the request was sent (Date.now()). */
  sends: Map<string, number>;
  sendSent: number;
  sendFailed: Record<string, number>;
};

export const REQUEST_TIMEOUT_MS = 10_000;
const TICK_MS = 20;

function why(err: unknown): string {
  const e = err as Error & { cause?: { code?: string } };
  if (e?.name === 'TimeoutError') return 'timeout';
  return e?.cause?.code ?? e?.name ?? 'error';
}

export async function victimPhase(opts: {
  origin: string;
  key: string;
  seconds: number;
  pingRate: number;
  sendRate: number;
  /** Makes each event's address unique across phases. */
  tag: string;
}): Promise<VictimPhase> {
  const r: VictimPhase = {
    ping: new LatencyHistogram(), pingSent: 0, pingOk: 0, pingTimeouts: 0, pingOther: {},
    sends: new Map(), sendSent: 0, sendFailed: {},
  };
  const headers = { 'x-api-key': opts.key };
  const inflight: Promise<void>[] = [];
  const ping = async () => {
    r.pingSent++;
    const t0 = performance.now();
    try {
      const res = await fetch(`${opts.origin}/public/v1/ping`, { headers, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
      await res.arrayBuffer();
      r.ping.record(performance.now() - t0);
      if (res.status === 200) r.pingOk++;
      else r.pingOther[res.status] = (r.pingOther[res.status] ?? 0) + 1;
    } catch (err) {
      const w = why(err);
      if (w === 'timeout') {
        r.pingTimeouts++;
        r.ping.record(performance.now() - t0);
      } else r.pingOther[w] = (r.pingOther[w] ?? 0) + 1;
    }
  };
  const send = async (i: number) => {
    r.sendSent++;
    const at = Date.now();
    try {
      const res = await fetch(`${opts.origin}/public/v1/email/events`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify({ event_name: 'lead.created', email: `v-${opts.tag}-${i}@victim.test` }),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      const body = (await res.json().catch(() => ({}))) as { event_id?: string };
      if (res.status === 202 && body.event_id) r.sends.set(body.event_id, at);
      else r.sendFailed[res.status] = (r.sendFailed[res.status] ?? 0) + 1;
    } catch (err) {
      const w = why(err);
      r.sendFailed[w] = (r.sendFailed[w] ?? 0) + 1;
    }
  };
  const ticks = Math.round((opts.seconds * 1000) / TICK_MS);
  let pings = 0;
  let sends = 0;
  const t0 = performance.now();
  for (let i = 1; i <= ticks; i++) {
    // Whole requests due by the end of this tick: fractional rates even out.
    const elapsed = (i * TICK_MS) / 1000;
    for (; pings < Math.floor(elapsed * opts.pingRate); pings++) inflight.push(ping());
    for (; sends < Math.floor(elapsed * opts.sendRate); sends++) inflight.push(send(sends));
    const wait = t0 + i * TICK_MS - performance.now();
    if (wait > 0) await new Promise((res) => setTimeout(res, wait));
  }
  await Promise.all(inflight);
  return r;
}

/**
 * Waits until every accepted event's message is at the SMTP sink (or the
 * deadline) and returns each send's latency, event request sent → DATA ended
 * at the sink. The sink knows Message-IDs; the message log maps them back to
 * the events. One not arrived by the deadline counts at the deadline: a lower
 * bound.
 */
export async function sendLatencies(opts: {
  sinkOrigin: string;
  db: Db;
  teamId: string;
  /** Event id → when its request was sent (Date.now()), as VictimPhase.sends. */
  sends: Map<string, number>;
  timeoutMs: number;
}): Promise<{ send: LatencyHistogram; arrived: number }> {
  const deadline = Date.now() + opts.timeoutMs;
  for (;;) {
    const got = (await (await fetch(`${opts.sinkOrigin}/arrivals`)).json()) as Arrival[];
    const { rows } = await sql<{ message_id: string; event_id: string }>`
      SELECT message_id, event_id FROM email_send_log
       WHERE team_id = ${opts.teamId} AND event_id = ANY (${[...opts.sends.keys()]}::uuid[]) AND message_id IS NOT NULL`.execute(opts.db);
    const byMessage = new Map(rows.map((r) => [r.message_id, r.event_id]));
    const arrivedAt = new Map<string, number>();
    for (const [id, at] of got) {
      const ev = byMessage.get(id);
      if (ev && !arrivedAt.has(ev)) arrivedAt.set(ev, at);
    }
    if (arrivedAt.size >= opts.sends.size || Date.now() > deadline) {
      const send = new LatencyHistogram();
      for (const [ev, at] of opts.sends) send.record((arrivedAt.get(ev) ?? Date.now()) - at);
      return { send, arrived: arrivedAt.size };
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
