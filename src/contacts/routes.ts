import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

export const contactsRoutes: FastifyPluginAsyncTypebox = async (_app) => {};
