import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { Type } from 'typebox';
import { ErrorBody, errorBody } from '../http/errors.ts';

const Health = Type.Object({ ok: Type.Boolean() });

export function operationsRoutes(app: FastifyInstance, pool: pg.Pool): void {
  const common = { tags: ['operations'], security: [] };
  app.get('/healthz', { schema: { ...common, summary: 'Liveness: the process answers', response: { 200: Health } } }, async () => ({ ok: true }));
  app.get(
    '/readyz',
    { schema: { ...common, summary: 'Readiness: the database answers', response: { 200: Health, 503: ErrorBody } } },
    async (_request, reply) => {
      try {
        await Promise.race([
          pool.query('SELECT 1'),
          new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 2_000).unref()),
        ]);
        return { ok: true };
      } catch {
        return reply.code(503).send(errorBody('SERVICE_UNAVAILABLE', 'database unreachable'));
      }
    },
  );
}
