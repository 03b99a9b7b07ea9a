import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

export const campaignsRoutes: FastifyPluginAsyncTypebox = async (_app) => {};
