import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse } from 'csv-parse/sync';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');
type Run = { code: number; stdout: string; stderr: string };

function plover(url: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...process.env, DATABASE_URL: url }, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('plover contacts import / export', () => {
  let t: TestApp;
  const dir = mkdtempSync(join(tmpdir(), 'plover-csv-'));
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const contacts = (teamId: string) =>
    t.database.db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).orderBy('email').execute();
  const events = async (teamId: string) =>
    Number((await t.database.db.selectFrom('events').select((e) => e.fn.countAll().as('n')).where('team_id', '=', teamId).executeTakeFirstOrThrow()).n);

  test('a malformed row in the middle is rejected with its line number; every other row is imported, without events', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const lines = ['Email,First Name,custom_int_1,Signup,Tags'];
    for (let i = 0; i < 2500; i++) {
      if (i === 1200) lines.push('not-an-email,Bad,1,x,a');
      else if (i === 1300) lines.push('n1300@example.com,Bad int,12abc,x,a');
      else if (i === 1400) lines.push('n1400@example.com,"unclosed quote,1,x,a');
      else if (i === 1500) lines.push('"n1500@example.com"x,Stray,1,x,a');
      else lines.push(`n${i}@example.com,Name ${i},${i},x,vip;imported`);
    }
    const file = join(dir, 'middle.csv');
    writeFileSync(file, lines.join('\n') + '\n');
    const r = await plover(t.database.url, ['contacts', 'import', file, '--team', teamId, '--map', 'signup=-', '--tag', 'csv', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.rows, 2500);
    assert.equal(out.rejected, 4);
    assert.equal(out.created, 2496);
    assert.equal(out.events_emitted, false);
    const rows = await contacts(teamId);
    assert.equal(rows.length, 2496);
    assert.ok(rows.some((c) => c.email === 'n1401@example.com'), 'the row after an unclosed quote is imported');
    const c7 = rows.find((c) => c.email === 'n7@example.com')!;
    assert.equal(c7.first_name, 'Name 7');
    assert.equal(String(c7.custom_int_1), '7');
    assert.deepEqual(c7.tags, ['vip', 'imported', 'csv']);
    assert.ok(!rows.some((c) => c.email === 'n1300@example.com'), 'a row with a bad integer is not half-written');
    assert.equal(await events(teamId), 0, 'no per-contact events without --emit-events');

    assert.equal(out.rejects_file, join(dir, 'middle.rejects.csv'));
    const rejects = parse(readFileSync(out.rejects_file), { relax_column_count: true }) as string[][];
    assert.deepEqual(rejects[0].slice(0, 3), ['line', 'reason', 'Email']);
    const byLine = new Map(rejects.slice(1).map((row) => [row[0], row[1]]));
    // Line 1 is the header: row i is on line i + 2.
    assert.match(byLine.get('1202') ?? '', /email must match format/);
    assert.match(byLine.get('1302') ?? '', /custom_int_1 must be an integer/);
    assert.match(byLine.get('1402') ?? '', /quoted field is never closed/);
    assert.match(byLine.get('1502') ?? '', /unreadable CSV: Invalid Closing Quote/);
  });

  test('--dry-run checks and counts but writes nothing', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const file = join(dir, 'dry.csv');
    writeFileSync(file, 'EMAIL,country_code\na@example.com,DE\nb@example.com,XX\n');
    const r = await plover(t.database.url, ['contacts', 'import', file, '--team', teamId, '--dry-run', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.imported, 1);
    assert.equal(out.rejected, 1);
    assert.equal((await contacts(teamId)).length, 0);
  });

  test('--emit-events emits contact.saved per imported contact, as the API does', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const file = join(dir, 'events.csv');
    writeFileSync(file, 'email\na@example.com\nb@example.com\n');
    const r = await plover(t.database.url, ['contacts', 'import', file, '--team', teamId, '--emit-events']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(await events(teamId), 2);
    assert.ok(!existsSync(join(dir, 'events.rejects.csv')), 'no rejects file when nothing was refused');
  });

  test('tags over the cap are refused per row, the rest of the batch imported', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const file = join(dir, 'tags.csv');
    const many = Array.from({ length: 150 }, (_, i) => `t${i}`).join(';');
    writeFileSync(file, `email,tags\nok@example.com,a;b\nmany@example.com,${many}\n`);
    const r = await plover(t.database.url, ['contacts', 'import', file, '--team', teamId, '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).rejected, 1);
    assert.deepEqual((await contacts(teamId)).map((c) => c.email), ['ok@example.com']);
  });

  test('export streams every contact with its fields and tags, and re-imports', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const file = join(dir, 'src.csv');
    const lines = ['email,first_name,custom_bool_1,tags'];
    for (let i = 0; i < 2100; i++) lines.push(`e${String(i).padStart(5, '0')}@example.com,"Doe, ""J"" ${i}",${i % 2 ? 'yes' : 'no'},x;y`);
    writeFileSync(file, lines.join('\n'));
    assert.equal((await plover(t.database.url, ['contacts', 'import', file, '--team', teamId])).code, 0);
    const other = await makeTeam(t.database.db);
    writeFileSync(join(dir, 'other.csv'), 'email\nsecret@other.example\n');
    await plover(t.database.url, ['contacts', 'import', join(dir, 'other.csv'), '--team', other.teamId]);

    const r = await plover(t.database.url, ['contacts', 'export', '--team', teamId]);
    assert.equal(r.code, 0, r.stderr);
    const rows = parse(r.stdout, { columns: true }) as Record<string, string>[];
    assert.equal(rows.length, 2100, 'every page of 1,000');
    assert.ok(!r.stdout.includes('secret@other.example'), 'only the team\'s contacts');
    assert.equal(rows[3].email, 'e00003@example.com');
    assert.equal(rows[3].first_name, 'Doe, "J" 3');
    assert.equal(rows[3].custom_bool_1, 'true');
    assert.equal(rows[3].tags, 'x;y');
    assert.match(rows[3].created_at, /^\d{4}-\d\d-\d\dT/);

    const again = await makeTeam(t.database.db);
    const out = join(dir, 'out.csv');
    writeFileSync(out, r.stdout);
    const re = await plover(t.database.url, ['contacts', 'import', out, '--team', again.teamId, '--json']);
    assert.equal(re.code, 0, re.stderr);
    assert.equal(JSON.parse(re.stdout).created, 2100);
    assert.equal(JSON.parse(re.stdout).rejected, 0);
  });

  test('usage errors exit 2, failures exit 1', async () => {
    const file = join(dir, 'noemail.csv');
    writeFileSync(file, 'name\nx\n');
    const { teamId } = await makeTeam(t.database.db);
    const cases: [string[], number, RegExp][] = [
      [['contacts', 'import', file, '--team', teamId], 2, /no e-mail column/],
      [['contacts', 'import', file, '--team', teamId, '--map', 'name=nope'], 2, /no contact field named "nope"/],
      [['contacts', 'import', file, '--team', teamId, '--map', 'oops'], 2, /--map must look like/],
      [['contacts', 'import', file, '--team', 'abc'], 2, /--team must be a UUID/],
      [['contacts', 'import', file], 2, /required option '--team/],
      [['contacts', 'import', join(dir, 'missing.csv'), '--team', teamId], 1, /cannot read/],
      [['contacts', 'export', '--team', '00000000-0000-4000-8000-000000000000'], 1, /no team with id/],
    ];
    const runs = await Promise.all(cases.map(([args]) => plover(t.database.url, args)));
    for (const [i, [args, code, message]] of cases.entries()) {
      assert.equal(runs[i].code, code, `${args.join(' ')}: ${runs[i].stderr}`);
      assert.match(runs[i].stderr, message);
    }
  });
});
