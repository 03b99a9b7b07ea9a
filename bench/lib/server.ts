// Parent side of a benchmark server: runs bench/servers/<name>.ts in its own
// Node process (the same Node binary and environment; the flags of this one,
// or for the app server those of `npm start`),
// so the load generator in this process does not share an event loop with it.
// Every server is started, measured and stopped the same way; what differs
// between servers is only the params each one gets (see lib/serve.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { ServerMessage } from './serve.ts';
import { scriptNodeFlags } from './node-flags.ts';

export const PARAMS_ENV = 'PLOVER_BENCH_SERVER_PARAMS';

export type CpuUsage = { user: number; system: number };

export type ServerProcess = {
  name: string;
  pid: number;
  /** http://127.0.0.1:<port> */
  origin: string;
  /** CPU time the server process has used so far, in microseconds. */
  cpuUsage(): Promise<CpuUsage>;
  /** Asks it to close (SIGTERM), then kills it if it has not exited within 10 s. */
  stop(): Promise<void>;
};

const SERVERS_DIR = join(import.meta.dirname, '..', 'servers');

export async function startServer(
  name: string,
  params: Record<string, unknown>,
  opts: {
    log?: (msg: string) => void;
    startTimeoutMs?: number;
    /** Node flags (default: `npm start`'s for the app server, which runs the API as deployed; this process's for the others). */
    execArgv?: string[];
  } = {},
): Promise<ServerProcess> {
  if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw new Error(`bad server name "${name}"`);
  const log = opts.log ?? (() => {});
  const execArgv = opts.execArgv ?? (name === 'app' ? scriptNodeFlags('start') : process.execArgv);
  const child = spawn(process.execPath, [...execArgv, join(SERVERS_DIR, `${name}.ts`)], {
    env: { ...process.env, [PARAMS_ENV]: JSON.stringify(params) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.on('error', () => {}); // surfaces as 'exit' or as the start timeout

  let port: number;
  try {
    port = await waitForReady(child, name, opts.startTimeoutMs ?? 60_000);
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    throw err;
  }
  log(`server ${name} (pid ${child.pid}) listening on 127.0.0.1:${port}`);

  let stopping: Promise<void> | undefined;
  return {
    name,
    pid: child.pid!,
    origin: `http://127.0.0.1:${port}`,
    cpuUsage: () => request<CpuUsage>(child, { type: 'cpu' }, 'cpu'),
    stop() {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}

function waitForReady(child: ChildProcess, name: string, timeoutMs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const done = (err: Error | undefined, port?: number) => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      if (err) reject(err);
      else resolve(port!);
    };
    const onMessage = (m: ServerMessage) => {
      if (m.type === 'ready') done(undefined, m.port);
      else if (m.type === 'failed') done(new Error(`server ${name} failed to start: ${m.error}`));
    };
    const onExit = (code: number | null, signal: string | null) =>
      done(new Error(`server ${name} exited before it was ready (${signal ?? `code ${code}`})`));
    const timer = setTimeout(() => done(new Error(`server ${name} not ready after ${timeoutMs} ms`)), timeoutMs);
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

function request<T>(child: ChildProcess, message: { type: string }, replyType: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: ServerMessage) => {
      if (m.type !== replyType) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(m as T);
    };
    const onExit = () => {
      child.off('message', onMessage);
      reject(new Error('server exited'));
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
    child.send(message);
  });
}
