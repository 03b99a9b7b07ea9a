import { createApiKey, createTeam } from '../src/teams/queries.ts';
import { measure } from './lib/load.ts';
import { scriptNodeFlags } from './lib/node-flags.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';
export async function run(opts: BenchOptions): Promise<void> {
  const pg = await opts.postgres();
  const database = await pg.createDatabase();
  opts.defer(() => database.drop());
  const team = await createTeam(database.db, 'Bench team');
  const { key } = await createApiKey(database.db, team.id, 'bench key');
  const prof = process.env.PROF === '1' ? ['--cpu-prof', '--cpu-prof-dir=' + (process.env.PDIR ?? '/tmp/prof'), '--cpu-prof-interval=100'] : [];
  const app = await startServer(process.env.SRV ?? 'app', { databaseUrl: database.url, appSecret: database.appSecret }, { log: opts.log, execArgv: [...scriptNodeFlags('start'), ...prof] });
  opts.defer(() => app.stop());
  const load = (s: number) => ({ url: app.origin + '/public/v1/ping', connections: opts.connections, duration: s, headers: { 'x-api-key': key }, expectBody: '{"ok":true}' });
  await measure(load(2), app);
  const r = await measure(load(opts.duration), app);
  console.log(JSON.stringify({ reqPerSec: r.reqPerSec, cpu: r.serverCpu }));
}
