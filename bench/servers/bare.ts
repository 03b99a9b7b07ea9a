// Baseline: a bare Fastify server (defaults, no logger, no plugins, no schema)
// answering {"ok":true} on the route the app's ping has.
import Fastify from 'fastify';
import { serve } from '../lib/serve.ts';

await serve(async () => {
  const app = Fastify();
  app.get('/public/v1/ping', async () => ({ ok: true }));
  return { app };
});
