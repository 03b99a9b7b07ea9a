import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

export const mailAccountsRoutes: FastifyPluginAsyncTypebox = async (_app) => {};
