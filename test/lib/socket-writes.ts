// Watches the writes of this process's client sockets to one local port (a
// test's SMTP server), for tests of how a message goes onto the wire.
import { Socket } from 'node:net';

/** Calls `onWrite` for each write to a socket connected to `port`; returns the function that stops watching. */
export function watchSocketWrites(port: number, onWrite: (socket: Socket, chunk: string) => void): () => void {
  // oxlint-disable-next-line typescript/unbound-method -- restored below, called with .apply(this)
  const write = Socket.prototype.write;
  Socket.prototype.write = function (this: Socket, ...args: unknown[]) {
    // remotePort: the client's side of the connection, not the server's replies on the same port.
    if (this.remotePort === port) onWrite(this, String(args[0]));
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as typeof write;
  return () => {
    Socket.prototype.write = write;
  };
}
