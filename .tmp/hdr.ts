import { buildTestApp, makeTeam } from '../test/helpers.ts';
const t = await buildTestApp({});
const { key } = await makeTeam(t.database.db);
const r = await t.app.inject({ url: '/public/v1/ping', headers: { 'x-api-key': key } });
console.log(r.statusCode, JSON.stringify(r.headers), r.body);
await t.close();
process.exit(0);
