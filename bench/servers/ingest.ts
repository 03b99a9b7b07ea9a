// Event source for bench/campaigns.ts's latency run: commits contact.saved
// events through ingestEvent() (the POST /email/events path) in its own
// process, as the API would, so that 200 ingest transactions a second do not
// share the worker's event loop and pool. POST /ingest {emails} commits one
// event per address, all at once, and answers each event's id and the moment
// (Date.now()) its transaction committed.
import Fastify from 'fastify';
import { createDb, createPool } from '../../src/db/pool.ts';
import { ingestEvent } from '../../src/ingest/ingest.ts';
import { serve } from '../lib/serve.ts';

export type IngestServerParams = { databaseUrl: string; teamId: string; poolSize: number };
export type Committed = [eventId: string, committedAt: number];

await serve<IngestServerParams>(async ({ databaseUrl, teamId, poolSize }) => {
  const pool = createPool(databaseUrl, poolSize);
  const db = createDb(pool);
  const app = Fastify();
  app.post('/ingest', async (request) => {
    const { emails } = request.body as { emails: string[] };
    return Promise.all(
      emails.map(async (email): Promise<Committed> => {
        const { eventId } = await ingestEvent(db, teamId, { event_name: 'contact.saved', email });
        return [eventId, Date.now()];
      }),
    );
  });
  return {
    app,
    async close() {
      await db.destroy();
    },
  };
});
