// The real app, built as src/server.ts builds it (buildApp on a pool) but with
// logging silent, a rate limit too high to reject anything, no Redis (unless
// given redisUrl) and no worker, on the database the parent created and migrated.
import pino from 'pino';
import { buildApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { createDb, createPool } from '../../src/db/pool.ts';
import { connectRedis } from '../../src/lib/redis.ts';
import { serve } from '../lib/serve.ts';

export type AppServerParams = {
  databaseUrl: string;
  appSecret: string;
  poolSize?: number;
  /** Rate-limit counters in this Redis (as with REDIS_URL); none by default. */
  redisUrl?: string;
};

await serve<AppServerParams>(async ({ databaseUrl, appSecret, poolSize = 20, redisUrl }) => {
  // Only these variables, not the caller's environment (no REDIS_URL etc.).
  const base = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', DATABASE_URL: databaseUrl, APP_SECRET: appSecret });
  const config = {
    ...base,
    rateLimitPerMinute: 100_000_000,
    // Throughput benchmarks run several bulk requests of one team at once; the
    // per-team cap (a fairness guard) is not what they measure.
    intake: { ...base.intake, heavyRequestsPerTeam: 1_000 },
  };
  const pool = createPool(databaseUrl, poolSize); // 20: openDatabase's default
  const db = createDb(pool);
  // As src/main.ts connects when REDIS_URL is set.
  const redis = redisUrl ? connectRedis(redisUrl, () => {}) : undefined;
  const app = await buildApp({ config, pool, db, redis, logger: pino({ level: 'silent' }) });
  return {
    app,
    async close() {
      redis?.disconnect();
      await db.destroy();
      if (!pool.ended) await pool.end(); // Kysely ends it only if it used it
    },
  };
});
