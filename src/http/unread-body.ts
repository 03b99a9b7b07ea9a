// A request answered without reading its body (401, 404, 405, 415, 429, a
// dashboard redirect) must not have that body read after all: Node's HTTP
// server reads the rest of an unread body to reuse the connection, so a 10 MB
// body to an unknown path would still cost 10 MB of reading. Such answers close
// the connection instead, unless the body is a few KiB (closing then costs a
// well-behaved client more than draining costs us).
import type { FastifyReply, FastifyRequest } from 'fastify';

const DRAIN_LIMIT = 16 * 1024;

/** True when the request carries a body (declared or chunked). */
export function hasBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length'];
  if (length !== undefined) return length !== '0';
  return request.headers['transfer-encoding'] !== undefined;
}

/** Marks the answer of a request whose body is left unread: the connection closes after it. */
export function leaveBodyUnread(request: FastifyRequest, reply: FastifyReply): void {
  if (!hasBody(request)) return;
  const length = Number(request.headers['content-length']);
  if (Number.isFinite(length) && length <= DRAIN_LIMIT) return;
  reply.header('connection', 'close');
}
