import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Ok, withErrors } from '../http/schemas.ts';

export const pingRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/ping',
    {
      schema: {
        tags: ['connectivity'],
        summary: 'Check that an API key works',
        description: 'Checks authorization only, not downstream services.',
        response: withErrors({ 200: Ok }),
      },
    },
    async () => ({ ok: true as const }),
  );
};
