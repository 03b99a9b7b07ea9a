// Child side of a benchmark server (see lib/server.ts): every file in
// bench/servers/ calls serve() with a function that builds its Fastify app from
// the params the parent passed. serve() listens on 127.0.0.1, port 0, reports
// the port over IPC, answers CPU-usage queries, and closes on SIGTERM/SIGINT or
// when the parent goes away.
import type { FastifyInstance } from 'fastify';

export type ServerMessage =
  | { type: 'ready'; port: number }
  | { type: 'failed'; error: string }
  | { type: 'cpu'; user: number; system: number };

export type Built = { app: FastifyInstance; close?: () => Promise<void> };

export async function serve<P>(build: (params: P) => Promise<Built>): Promise<void> {
  const send = (m: ServerMessage) => process.send?.(m);
  if (!process.send) throw new Error('a benchmark server must be started by bench/lib/server.ts (no IPC channel)');
  let built: Built;
  try {
    const params = JSON.parse(process.env.PLOVER_BENCH_SERVER_PARAMS ?? '{}') as P;
    built = await build(params);
    await built.app.listen({ port: 0, host: '127.0.0.1' });
  } catch (err) {
    const error = err instanceof Error ? (err.stack ?? err.message) : String(err);
    process.send({ type: 'failed', error } satisfies ServerMessage, () => process.exit(1));
    return;
  }
  const { app, close } = built;

  let closing = false;
  const shutdown = async () => {
    if (closing) return;
    closing = true;
    const timer = setTimeout(() => process.exit(1), 8_000);
    timer.unref();
    try {
      await app.close();
      await close?.();
    } finally {
      process.exit(0);
    }
  };
  // shutdown cannot reject: its finally exits the process.
  process.on('SIGTERM', () => void shutdown());
  process.on('SIGINT', () => void shutdown());
  process.on('disconnect', () => void shutdown());
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'cpu') {
      const { user, system } = process.cpuUsage();
      send({ type: 'cpu', user, system });
    }
  });

  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('server is not listening on TCP');
  send({ type: 'ready', port: address.port });
}
