// The attackers of bench/isolation.ts, in a worker thread of the bench process:
// their sending (10 MB bodies, hundreds of slow sockets) gets its own event
// loop, so it cannot delay the victim's requests the bench times on the main
// thread. Every class of lib/hostile.ts runs `attackers` loops at once, each
// sending its class's variants in turn, one request at a time, every request
// abandoned after timeoutMs. On {type: 'stop'} everything in flight is
// aborted and the counts come back as {type: 'stats', stats}.
import { connect, type Socket } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { CLASS_IDS, variantsOf, type AttackContext, type ClassId, type Variant } from './hostile.ts';

export type ClassStats = { sent: number; statuses: Record<string, number>; variants: string[]; note?: string };
export type AttackStats = Partial<Record<ClassId, ClassStats>>;
export type AttackData = AttackContext & { classes: ClassId[]; nice?: number };

const data = workerData as AttackData;
const stop = new AbortController();
const stats: AttackStats = {};
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function count(s: ClassStats, status: string): void {
  s.statuses[status] = (s.statuses[status] ?? 0) + 1;
}

/** A status code, or why there was none: timeout, or the socket error's code. */
function failure(err: unknown): string {
  if (stop.signal.aborted) return 'aborted at end';
  const e = err as Error & { cause?: { code?: string; name?: string } };
  if (e?.name === 'TimeoutError' || e?.cause?.name === 'TimeoutError') return 'timeout';
  return e?.cause?.code ?? e?.name ?? 'error';
}

async function loop(s: ClassStats, variants: Variant[], slot: number, counter: { n: number }): Promise<void> {
  let i = slot;
  while (!stop.signal.aborted) {
    const v = variants[i++ % variants.length]!;
    const started = Date.now();
    const n = counter.n++;
    const body = typeof v.body === 'function' ? v.body(n) : v.body;
    const headers = { ...v.headers, ...(v.anonymous ? {} : { 'x-api-key': data.key }) };
    s.sent++;
    try {
      const res = await fetch(data.origin + v.path, {
        method: v.method,
        headers,
        body,
        redirect: 'manual',
        signal: AbortSignal.any([stop.signal, AbortSignal.timeout(data.timeoutMs)]),
      });
      count(s, String(res.status));
      // Not read: a preview page can be hundreds of megabytes.
      await res.body?.cancel().catch(() => undefined);
    } catch (err) {
      count(s, failure(err));
    }
    if (v.paceMs) {
      const wait = v.paceMs - (Date.now() - started);
      if (wait > 0) await sleep(wait);
    }
  }
}

/**
 * Slowloris: each socket sends a request line and then header bytes one at a
 * time, 2 a second, never ending the headers. A socket the server closes is
 * replaced; the status counts say how the server ended them.
 */
async function slowloris(s: ClassStats, sockets: number): Promise<void> {
  const { hostname, port } = new URL(data.origin);
  const open = new Set<Socket>();
  const start = () => {
    if (stop.signal.aborted) return;
    s.sent++;
    const socket = connect({ host: hostname, port: Number(port) });
    const opened = Date.now();
    let answer = '';
    open.add(socket);
    socket.setNoDelay(true);
    socket.on('connect', () => socket.write(`GET /public/v1/ping HTTP/1.1\r\nHost: ${hostname}\r\nX-Slow: `));
    socket.on('data', (d: Buffer) => (answer += d.toString('latin1').slice(0, 64)));
    const timer = setInterval(() => socket.writable && socket.write('a'), 500);
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearInterval(timer);
      open.delete(socket);
      if (stop.signal.aborted) return;
      const status = /^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1];
      const after = Math.round((Date.now() - opened) / 1000);
      count(s, status ? `${status} after ${after} s` : `closed after ${after < 10 ? '<10' : after < 60 ? '<60' : '>=60'} s`);
      setTimeout(start, 100); // keep the number of sockets up
    });
  };
  for (let i = 0; i < sockets; i++) {
    start();
    await sleep(5);
  }
  await new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve(), { once: true }));
  s.statuses['open at end'] = open.size;
  for (const socket of open) socket.destroy();
}

const runs: Promise<void>[] = [];
for (const id of CLASS_IDS.filter((c) => data.classes.includes(c))) {
  if (id === 'h') {
    const s: ClassStats = { sent: 0, statuses: {}, variants: [`${data.attackers * data.slowSockets} sockets, headers 1 byte/500 ms`] };
    stats.h = s;
    runs.push(slowloris(s, data.attackers * data.slowSockets));
    continue;
  }
  const variants = variantsOf(id, data);
  const s: ClassStats = { sent: 0, statuses: {}, variants: variants.map((v) => v.name) };
  stats[id] = s;
  if (!variants.length) {
    s.note = 'nothing to send (see the set-up notes)';
    continue;
  }
  const counter = { n: 0 };
  for (let slot = 0; slot < data.attackers; slot++) runs.push(loop(s, variants, slot, counter));
}
parentPort!.postMessage({ type: 'started' });
parentPort!.on('message', (m: { type?: string }) => {
  if (m?.type !== 'stop') return;
  stop.abort();
  // Every loop ends on the abort; one that does not (seen once: a run hung for
  // minutes with no socket open) must not hold the bench's report hostage.
  const settled = Promise.allSettled(runs).then(() => true);
  void Promise.race([settled, new Promise<boolean>((r) => setTimeout(() => r(false), 5_000))]).then((all) => {
    if (!all) (stats.a ?? Object.values(stats)[0] ?? ({} as ClassStats)).note = 'some attacker loops had not ended 5 s after the stop';
    parentPort!.postMessage({ type: 'stats', stats });
    parentPort!.close();
  });
});
