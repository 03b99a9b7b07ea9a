// A raw HTTP/1.1 client over a TCP socket, for what fetch and node:http cannot
// do: send the head and only part of a body (or headers byte by byte), then
// watch when the server answers and when it closes the connection.
import { connect, type Socket } from 'node:net';

export type RawExchange = {
  socket: Socket;
  /** Resolves with the status line's code and the head, when the response head arrives. */
  response: Promise<{ status: number; head: string; atMs: number }>;
  /** Resolves when the server closed or reset the connection (ms since the start). */
  closed: Promise<number>;
  /** Writes more bytes if the socket is still open; false when it is not. */
  write(data: string | Buffer): boolean;
  startedAt: number;
};

export function openRaw(port: number, initial: string | Buffer = ''): RawExchange {
  const startedAt = performance.now();
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {}); // a reset by the server is an outcome, not a failure
  let buffered = '';
  let resolveResponse!: (v: { status: number; head: string; atMs: number }) => void;
  const response = new Promise<{ status: number; head: string; atMs: number }>((r) => (resolveResponse = r));
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(performance.now() - startedAt)));
  socket.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('latin1');
    const end = buffered.indexOf('\r\n\r\n');
    if (end >= 0) {
      const head = buffered.slice(0, end);
      resolveResponse({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), head, atMs: performance.now() - startedAt });
    }
  });
  socket.once('close', () => resolveResponse({ status: 0, head: buffered, atMs: performance.now() - startedAt }));
  if (initial.length) socket.write(initial);
  return {
    socket,
    response,
    closed,
    startedAt,
    write(data) {
      if (socket.destroyed || !socket.writable) return false;
      socket.write(data);
      return true;
    },
  };
}

export function head(method: string, path: string, headers: Record<string, string>): string {
  const lines = [`${method} ${path} HTTP/1.1`, 'host: 127.0.0.1', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  return lines.join('\r\n') + '\r\n\r\n';
}

/** Rejects when `p` takes longer than `ms`: the bound a test asserts. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    p,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms).unref()),
  ]);
}
