// `npm run bench -- csv-import [--rows <n>] [--api-contacts <n>]`: rows/s and
// peak RSS of `plover contacts import`, against the bulk-upsert API's rate in
// the same run.
//
// Generates a CSV of n rows (default 1,000,000; every contact field filled,
// two tags, the contacts of bench/bulk-upsert.ts) streamed to a temporary file,
// with one malformed row (a bad e-mail) in the middle. Then:
//
//   import  the real CLI in its own process (`plover contacts import --json`),
//           its peak RSS read from /proc/<pid>/status (VmHWM) while it runs;
//           the summary must say n - 1 imported, 1 rejected, and the rejects
//           file must name the middle row's line;
//   API     POST /public/v1/email/contacts/bulk-upsert, 1,000 contacts per
//           request, 4 in flight, to the real app in its own process, for
//           --api-contacts contacts (default min(n, 200,000)) of another team.
//
// Both write into fresh teams of one fresh database, the import first: the
// import's team grows 0 -> n, the API's 0 -> --api-contacts, in a table that
// already holds the import's n rows. Per batch, both look contacts up by
// (team_id, email) in that one table, so the comparison is of the same work
// per contact at a table size at least the import's; the API also records
// one event per contact, which the import does not (its point: no welcome
// campaign per imported row). The report says which team sizes were compared.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool as HttpPool } from 'undici';
import { stringify } from 'csv-stringify';
import { createApiKey, createTeam } from '../src/teams/queries.ts';
import type { AppServerParams } from './servers/app.ts';
import { fmt, table } from './lib/report.ts';
import { startServer } from './lib/server.ts';
import type { BenchOptions } from './lib/types.ts';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');
const NODE_FLAGS = ['--max-semi-space-size=2'];
const BATCH = 1000;
const IN_FLIGHT = 4;
const T0 = Date.UTC(2025, 0, 1);

function contact(prefix: string, i: number) {
  return {
    email: `${prefix}.${i}@example${i % 100}.com`,
    first_name: `First${i}`,
    last_name: `Last${i}`,
    phone: `+1555${String(i % 10_000_000).padStart(7, '0')}`,
    foreign_id: `crm-${prefix}-${i}`,
    country_code: 'US',
    custom_str_1: `plan-basic-${i % 7}`,
    custom_str_2: `utm_source=newsletter&utm_campaign=c${i % 50}`,
    custom_int_1: i,
    custom_int_2: i % 1000,
    custom_dec_1: (i % 10_000) / 100 + 0.25,
    custom_datetime_1: new Date(T0 + i * 60_000).toISOString(),
    custom_bool_1: i % 2 === 0,
    tags: ['newsletter', `group-${i % 10}`],
  };
}
const COLUMNS = Object.keys(contact('x', 0));

async function writeCsv(file: string, rows: number, bad: number): Promise<void> {
  const out = createWriteStream(file);
  const csv = stringify({ header: true, columns: COLUMNS });
  csv.pipe(out);
  for (let i = 0; i < rows; i++) {
    const c = contact('csv', i) as Record<string, unknown>;
    if (i === bad) c.email = 'not-an-address';
    const row = COLUMNS.map((k) => (Array.isArray(c[k]) ? (c[k] as string[]).join(';') : String(c[k])));
    if (!csv.write(row)) await once(csv, 'drain');
  }
  csv.end();
  await once(out, 'close');
}

/** Runs the CLI, sampling its peak RSS (VmHWM: the kernel's high-water mark) until it exits. */
async function runImport(env: NodeJS.ProcessEnv, args: string[]) {
  // The flags bin/plover.js gives the CLI (it re-executes it, so its own RSS would not be the import's).
  const child = spawn(process.execPath, [...NODE_FLAGS, CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  let peakKb = 0;
  const timer = setInterval(() => {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      if (m) peakKb = Math.max(peakKb, Number(m[1]));
    } catch {
      // exited between two samples
    }
  }, 100);
  const started = performance.now();
  const [code] = (await once(child, 'exit')) as [number];
  clearInterval(timer);
  const seconds = (performance.now() - started) / 1000;
  if (code !== 0) throw new Error(`import exited ${code}: ${stderr}`);
  return { summary: JSON.parse(stdout), seconds, peakMb: peakKb / 1024 };
}

export async function run(opts: BenchOptions): Promise<void> {
  const rows = opts.flags.rows ?? 1_000_000;
  const apiContacts = opts.flags['api-contacts'] ?? Math.min(rows, 200_000);
  const database = await (await opts.postgres()).createDatabase();
  opts.defer(() => database.drop());
  const dir = mkdtempSync(join(tmpdir(), 'plover-bench-csv-'));
  opts.defer(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'contacts.csv');
  const bad = Math.floor(rows / 2);
  opts.log(`writing ${rows} rows to ${file}`);
  await writeCsv(file, rows, bad);

  const importTeam = await createTeam(database.db, 'csv import');
  opts.log('importing with the CLI');
  const env = { ...process.env, DATABASE_URL: database.url, APP_SECRET: database.appSecret, LOG_LEVEL: 'silent' };
  const imp = await runImport(env, ['contacts', 'import', file, '--team', importTeam.id, '--json']);
  const s = imp.summary as { rows: number; imported: number; created: number; rejected: number; rejects_file: string };
  if (s.rows !== rows || s.created !== rows - 1 || s.rejected !== 1) throw new Error(`unexpected summary ${JSON.stringify(s)}`);
  const rejects = readFileSync(s.rejects_file, 'utf8');
  if (!rejects.includes(`\n${bad + 2},`)) throw new Error(`the rejects file does not name line ${bad + 2}: ${rejects.slice(0, 300)}`);

  opts.log(`API: ${apiContacts} contacts through bulk-upsert`);
  const apiTeam = await createTeam(database.db, 'api');
  const { key } = await createApiKey(database.db, apiTeam.id, 'bench');
  const params: AppServerParams = { databaseUrl: database.url, appSecret: database.appSecret };
  const app = await startServer('app', params, { log: opts.log });
  opts.defer(() => app.stop());
  const http = new HttpPool(app.origin, { connections: IN_FLIGHT, pipelining: 1 });
  opts.defer(() => http.close());
  const bodies: string[] = [];
  for (let start = 0; start < apiContacts; start += BATCH) {
    const n = Math.min(BATCH, apiContacts - start);
    bodies.push(JSON.stringify({ contacts: Array.from({ length: n }, (_, j) => contact('api', start + j)) }));
  }
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < bodies.length) {
        const body = bodies[next++];
        const res = await http.request({
          path: '/public/v1/email/contacts/bulk-upsert', method: 'POST', body,
          headers: { 'content-type': 'application/json', 'x-api-key': key },
        });
        const text = await res.body.text();
        if (res.statusCode !== 200) throw new Error(`bulk-upsert answered ${res.statusCode}: ${text.slice(0, 300)}`);
      }
    }),
  );
  const apiSeconds = (performance.now() - started) / 1000;

  const importRate = rows / imp.seconds;
  const apiRate = apiContacts / apiSeconds;
  process.stdout.write(
    `\ncsv-import: ${fmt(rows)} rows, 1 malformed at line ${bad + 2} (reported)\n` +
      table(
        ['path', 'contacts', 'seconds', 'contacts/s', 'peak RSS MB'],
        [
          ['CLI import (no events)', rows, imp.seconds.toFixed(1), fmt(Math.round(importRate)), imp.peakMb.toFixed(0)],
          ['API bulk-upsert (4 in flight, events)', apiContacts, apiSeconds.toFixed(1), fmt(Math.round(apiRate)), '-'],
        ],
      ) +
      `\nteam sizes: import 0 -> ${fmt(rows)}, API 0 -> ${fmt(apiContacts)} (after the import, in the same table)` +
      `\nimport / API rate: ${(importRate / apiRate).toFixed(2)} (goal >= 1); peak RSS goal < 300 MB: ${imp.peakMb < 300 ? 'met' : 'MISSED'}\n`,
  );
}
