// Opens the database a process should use: DATABASE_URL when set, else the
// embedded PostgreSQL under DATA_DIR (started here, or found already running).
import type pg from 'pg';
import type { Config } from '../config.ts';
import { startEmbedded } from './embedded.ts';
import { createDb, createPool, type Db } from './pool.ts';

export type Database = {
  url: string;
  pool: pg.Pool;
  db: Db;
  appSecret: string;
  embedded: boolean;
  close(): Promise<void>;
};

export async function openDatabase(config: Config, log: (msg: string) => void = () => {}, poolSize = 20): Promise<Database> {
  const embedded = config.databaseUrl ? undefined : await startEmbedded({ dataDir: config.dataDir, log });
  const url = config.databaseUrl ?? embedded!.url;
  const pool = createPool(url, poolSize, { randomPageCost: config.databaseRandomPageCost });
  const db = createDb(pool);
  let closed = false;
  return {
    url,
    pool,
    db,
    appSecret: config.appSecret ?? embedded!.appSecret,
    embedded: embedded !== undefined,
    async close() {
      if (closed) return;
      closed = true;
      await db.destroy().catch(() => undefined);
      // Kysely ends the pool only if it ever used it.
      if (!pool.ended) await pool.end().catch(() => undefined);
      if (embedded?.owned) await embedded.stop();
    },
  };
}
