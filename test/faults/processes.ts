// Plover processes for the fault and scale-out tests, started as deployed:
// `node src/server.ts` (API, RUN_WORKER=false) and `node src/worker.ts`, each
// on 127.0.0.1 with its own environment; killed by stopAll().
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const root = join(import.meta.dirname, '..', '..');

export type PloverProcess = { child: ChildProcess; origin?: string; stop(): Promise<void> };

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

function start(entry: string, env: NodeJS.ProcessEnv): ChildProcess {
  return spawn(process.execPath, [entry], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: 'silent', ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

function stopper(child: ChildProcess): () => Promise<void> {
  return async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  };
}

/** An API process (no worker) listening on a free port; resolves once /healthz answers. */
export async function startApi(env: NodeJS.ProcessEnv): Promise<PloverProcess> {
  const port = await freePort();
  const child = start('src/server.ts', { RUN_WORKER: 'false', HOST: '127.0.0.1', PORT: String(port), ...env });
  const origin = `http://127.0.0.1:${port}`;
  const proc = { child, origin, stop: stopper(child) };
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`API process exited (${child.exitCode})`);
    try {
      if ((await fetch(`${origin}/healthz`)).ok) return proc;
    } catch {
      // not listening yet
    }
    if (i > 600) {
      await proc.stop();
      throw new Error('API process did not start within 60 s');
    }
    await sleep(100);
  }
}

/** A worker process; resolves once `ready()` says so (e.g. its heartbeat row exists). */
export async function startWorkerProcess(env: NodeJS.ProcessEnv, ready: () => Promise<boolean>): Promise<PloverProcess> {
  const child = start('src/worker.ts', env);
  const proc = { child, stop: stopper(child) };
  for (let i = 0; !(await ready()); i++) {
    if (child.exitCode !== null) throw new Error(`worker process exited (${child.exitCode})`);
    if (i > 600) {
      await proc.stop();
      throw new Error('worker process did not start within 60 s');
    }
    await sleep(100);
  }
  return proc;
}
