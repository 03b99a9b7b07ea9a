import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runOnce } from 'graphile-worker';
import { buildTaskList } from '../../src/tasks.ts';
import { buildTestApp, testConfig, type TestApp } from '../helpers.ts';
import { head, openRaw, within } from '../http/raw-client.ts';
import { signedIn, type Session } from './session.ts';

const LIMIT = 256 * 1024;
const dataDir = mkdtempSync(join(tmpdir(), 'plover-dash-import-'));
let t: TestApp;
let port: number;

before(async () => {
  t = await buildTestApp({ config: { dataDir, intake: { ...testConfig().intake, dashboardImportLimitBytes: LIMIT } } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  port = (t.app.server.address() as AddressInfo).port;
});
after(() => t.close());

const BOUNDARY = '----plover-test-boundary';
function multipart(csv: string | Buffer, emitEvents = false): Buffer {
  const parts: (string | Buffer)[] = [];
  if (emitEvents) parts.push(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="emit_events"\r\n\r\n1\r\n`);
  parts.push(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="file"; filename="people.csv"\r\ncontent-type: text/csv\r\n\r\n`, csv, `\r\n--${BOUNDARY}--\r\n`);
  return Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p)));
}

async function upload(session: Session, csv: string | Buffer, opts: { emitEvents?: boolean; csrf?: string } = {}) {
  const cookie = [...session.jar].map(([k, v]) => `${k}=${v}`).join('; ');
  return t.app.inject({
    method: 'POST',
    url: `/contacts/import?_csrf=${encodeURIComponent(opts.csrf ?? session.csrf)}`,
    headers: { cookie, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
    payload: multipart(csv, opts.emitEvents),
  });
}

const runJobs = () => runOnce({ pgPool: t.database.pool, taskList: buildTaskList({ db: t.database.db, config: testConfig() }), concurrency: 1 });
const count = async (table: 'contacts' | 'events', teamId: string) =>
  Number((await t.database.db.selectFrom(table).select((e) => e.fn.countAll().as('n')).where('team_id', '=', teamId).executeTakeFirstOrThrow()).n);

describe('dashboard: Contacts → Import', () => {
  test('a signed-in upload is stored, imported by a priority +2 job, and the page shows progress, result and rejects', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db, 'importers');
    const page = await session.get('/contacts/import');
    assert.equal(page.statusCode, 200);
    assert.match(page.body, /enctype="multipart\/form-data"/);
    assert.match(page.body, /name="emit_events" value="1"(?![^>]*checked)/, 'the checkbox is off by default');

    const rows = ['Email,First Name,tags'];
    for (let i = 0; i < 1500; i++) rows.push(i === 700 ? 'broken,x,' : `p${i}@example.com,P${i},a;b`);
    const res = await upload(session, rows.join('\n') + '\n');
    assert.equal(res.statusCode, 303, res.body);
    const url = String(res.headers.location);
    assert.match(url, /^\/contacts\/import\/[0-9a-f-]{36}$/);

    const queued = await session.get(url);
    assert.equal(queued.statusCode, 200);
    assert.match(queued.body, /queued/);
    assert.match(queued.body, /<span class="rows-total">1500<\/span>/);
    assert.match(String(queued.headers.refresh), /^2/, 'the page refreshes while the import runs');
    const job = await t.database.pool.query(
      `SELECT j.priority FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks k ON k.id = j.task_id WHERE k.identifier = 'contact_import'`,
    );
    assert.deepEqual(job.rows.map((r) => r.priority), [2]);

    await runJobs();
    const done = await session.get(url);
    assert.match(done.body, /class="import-status">done/);
    assert.match(done.body, /<span class="rows-done">1500<\/span>/);
    assert.match(done.body, /<span class="rejected">1<\/span>/);
    assert.match(done.body, /<span class="created">1499<\/span>/);
    assert.equal(done.headers.refresh, undefined);
    assert.equal(await count('contacts', teamId), 1499);
    assert.equal(await count('events', teamId), 0, 'no events unless the box is ticked');

    const rejects = await session.get(`${url}/rejects.csv`);
    assert.equal(rejects.statusCode, 200);
    assert.match(String(rejects.headers['content-type']), /^text\/csv/);
    assert.match(rejects.body, /^702,"email must match format ""contact-email""",broken,x,$/m);
    assert.deepEqual(readdirSync(join(dataDir, 'imports')).filter((f) => !f.endsWith('.rejects.csv')), [], 'the upload is removed once imported');
  });

  test('the emit-events box makes one contact.saved per contact', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db, 'emitters');
    const res = await upload(session, 'email\na@example.com\nb@example.com\n', { emitEvents: true });
    assert.equal(res.statusCode, 303);
    await runJobs();
    assert.equal(await count('events', teamId), 2);
  });

  test("another team's import (page and rejects) is 404", async () => {
    const a = await signedIn(t.app, t.database.db, 'owner');
    const b = await signedIn(t.app, t.database.db, 'stranger');
    const res = await upload(a.session, 'email\nbad\n');
    const url = String(res.headers.location);
    await runJobs();
    assert.equal((await a.session.get(`${url}/rejects.csv`)).statusCode, 200);
    assert.equal((await b.session.get(url)).statusCode, 404);
    assert.equal((await b.session.get(`${url}/rejects.csv`)).statusCode, 404);
    assert.equal((await b.session.get('/contacts/import/not-a-uuid')).statusCode, 404);
  });

  test('a file over the limit is refused with a 413 page; nothing is kept', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db, 'big');
    const before = readdirSync(join(dataDir, 'imports')).length;
    const res = await upload(session, 'email\n' + 'x@example.com\n'.repeat(LIMIT / 10));
    assert.equal(res.statusCode, 413);
    assert.match(res.body, /DASHBOARD_IMPORT_LIMIT_BYTES/);
    assert.equal(readdirSync(join(dataDir, 'imports')).length, before);
    const rows = await t.database.db.selectFrom('contact_imports').select('id').where('team_id', '=', teamId).execute();
    assert.equal(rows.length, 0);
  });

  for (const who of ['signed out', 'signed in, wrong CSRF token'] as const) {
    test(`${who}: a 100 MB upload is answered from the headers, its body never read`, async () => {
      let cookie = '';
      if (who !== 'signed out') {
        const { session } = await signedIn(t.app, t.database.db, 'raw');
        cookie = [...session.jar].map(([k, v]) => `${k}=${v}`).join('; ');
      }
      const headers: Record<string, string> = {
        'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
        'content-length': String(100 * 1024 * 1024),
        ...(cookie ? { cookie } : {}),
      };
      const x = openRaw(port, head('POST', '/contacts/import?_csrf=forged', headers) + multipart('email\n').toString().slice(0, 200));
      const res = await within(x.response, 2_000, who);
      assert.equal(res.status, who === 'signed out' ? 303 : 403, res.head);
      await within(x.closed, 2_000, `${who}: connection closed rather than reading 100 MB`);
      assert.ok(!existsSync(join(dataDir, 'imports')) || readdirSync(join(dataDir, 'imports')).every((f) => f.endsWith('.rejects.csv')));
    });
  }
});
