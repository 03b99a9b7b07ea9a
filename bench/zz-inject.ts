import pino from 'pino';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createDb, createPool } from '../src/db/pool.ts';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import type { BenchOptions } from './lib/types.ts';
export async function run(opts: BenchOptions): Promise<void> {
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const team = await createTeam(database.db, 'Bench team');
  const { key } = await createApiKey(database.db, team.id, 'bench key');
  const base = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', DATABASE_URL: database.url, APP_SECRET: database.appSecret });
  const config = { ...base, rateLimitPerMinute: 100_000_000 };
  const pool = createPool(database.url, 5);
  const db = createDb(pool);
  const app = await buildApp({ config, pool, db, logger: pino({ level: 'silent' }) });
  await app.ready();
  const req = { method: 'GET' as const, url: '/public/v1/ping', headers: { 'x-api-key': key } };
  const batch = async (n: number) => { for (let i = 0; i < n; i++) { const r = await app.inject(req); if (r.statusCode !== 200) throw new Error(String(r.statusCode)); } };
  await batch(30000);
  const res: number[] = [];
  for (let k = 0; k < 5; k++) {
    const c0 = process.cpuUsage();
    await batch(40000);
    const c = process.cpuUsage(c0);
    res.push((c.user + c.system) / 40000);
  }
  res.sort((a, b) => a - b);
  console.log(`ZZINJECT µs/request min ${res[0]!.toFixed(2)} median ${res[2]!.toFixed(2)} all ${res.map((x) => x.toFixed(2)).join(' ')}`);
  await app.close(); await db.destroy();
}
