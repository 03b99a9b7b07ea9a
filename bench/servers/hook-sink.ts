// Webhook receiver for bench/isolation.ts: answers 200 to every POST and
// counts them, so that each delivery a tracking replay causes costs the
// service a real signed HTTP request. GET /count gives the total.
import Fastify from 'fastify';
import { serve } from '../lib/serve.ts';

await serve(async () => {
  const app = Fastify({ bodyLimit: 1024 * 1024 });
  let count = 0;
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, _body, done) => done(null, null));
  app.post('/*', async () => {
    count++;
    return { ok: true };
  });
  app.get('/count', async () => ({ count }));
  return { app };
});
