// The service under test of bench/isolation.ts, as an operator runs it: one
// process with the API and the worker (bench/servers/service.ts wraps
// src/main.ts), configured through the environment. Besides start and stop:
// its pid (its resident memory is read from /proc by lib/rss.ts), its
// event-loop delay over IPC, and whether it died.
import { spawn } from 'node:child_process';
import { scriptNodeFlags } from './node-flags.ts';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';

export type { LoopDelay } from './loop-delay.ts';
import type { LoopDelay } from './loop-delay.ts';

export type Service = {
  pid: number;
  origin: string;
  /** Set once the process has exited: how, and when (Date.now()). */
  died?: { how: string; at: number };
  /** Event-loop delay since the last reset, ms; undefined when the process is gone or does not answer in 60 s. */
  loopDelay(): Promise<LoopDelay | undefined>;
  resetLoopDelay(): Promise<void>;
  stop(): Promise<void>;
};

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

// A blow-up (the issue measured 2.5 GB for one Liquid range) ends in a crash
// the bench reports, not in the shared machine's memory.
const HEAP_MIB = 2048;

export async function startService(env: Record<string, string>, log: (m: string) => void): Promise<Service> {
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  // PUBLIC_URL on loopback: tracking links point here, and it marks a local trial.
  const childEnv: NodeJS.ProcessEnv = { ...process.env, PUBLIC_URL: origin, ...env, HOST: '127.0.0.1', PORT: String(port) };
  delete childEnv.REDIS_URL; // the bench measures one process; a shared limiter is not what it is about
  const child = spawn(process.execPath, [`--max-old-space-size=${HEAP_MIB}`, ...scriptNodeFlags('start'), join(import.meta.dirname, '..', 'servers', 'service.ts')], {
    env: childEnv,
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const service: Service = {
    pid: child.pid!,
    origin,
    loopDelay: () => ask<LoopDelay>('eld'),
    resetLoopDelay: async () => void (await ask('eld-reset')),
    async stop() {
      if (service.died) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      service.died = { how: signal ? `killed by ${signal}` : `exit code ${code}`, at: Date.now() };
      resolve();
    }),
  );
  child.on('error', () => undefined);

  function ask<T>(type: string): Promise<T | undefined> {
    if (service.died || !child.connected) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const done = (v: T | undefined) => {
        clearTimeout(timer);
        child.off('message', onMessage);
        resolve(v);
      };
      const onMessage = (m: { type?: string }) => m?.type === type && done(m as T);
      // Answered on the service's event loop: a stalled loop answers late, and
      // the stall is then in the figure.
      const timer = setTimeout(() => done(undefined), 60_000);
      child.on('message', onMessage);
      child.send({ type }, (err) => err && done(undefined));
    });
  }

  for (let i = 0; ; i++) {
    if (service.died) throw new Error(`the service exited during start-up (${service.died.how})`);
    if (await fetch(`${origin}/readyz`).then((r) => r.ok, () => false)) break;
    if (i > 600) {
      await service.stop();
      throw new Error('the service did not become ready within 60 s');
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  log(`service (API and worker, pid ${child.pid}) listening on ${origin}`);
  return service;
}
