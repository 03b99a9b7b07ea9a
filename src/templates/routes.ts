import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

export const templatesRoutes: FastifyPluginAsyncTypebox = async (_app) => {};
