import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { parse } from 'csv-parse/sync';
import { after, before, describe, test } from 'node:test';
import { importContacts, mapColumns, RejectsSink } from '../../src/contacts/csv-import.ts';
import { csvRecords } from '../../src/contacts/csv-records.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'plover-import-'));

describe('CSV import (in process)', () => {
  let d: TestDatabase;
  before(async () => {
    d = await createTestDatabase();
  });
  after(() => d.drop());

  const run = (teamId: string, csv: string, extra: Partial<Parameters<typeof importContacts>[0]> = {}) =>
    importContacts({ db: d.db, teamId, input: Readable.from([Buffer.from(csv)]), maxTags: 100, rejects: new RejectsSink(join(dir, `${teamId}.csv`)), ...extra });

  test('a later row wins over an earlier one in another batch, though batches are written two at a time', async () => {
    const { teamId } = await makeTeam(d.db);
    const rows = ['email,first_name,tags'];
    for (let i = 0; i < 40; i++) rows.push(`A@example.com,v${i},t${i}`, `b${i}@example.com,x,`);
    const s = await run(teamId, rows.join('\n'), { batchSize: 3 });
    assert.equal(s.rejected, 0);
    const a = await d.db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).where('email', '=', 'a@example.com').executeTakeFirstOrThrow();
    assert.equal(a.first_name, 'v39');
    assert.equal(a.tags.length, 40, 'tags accumulate over every row of the address');
  });

  test('headers: any case, spaces for underscores, --map overrides and ignores; unknown ones are listed', () => {
    const { columns, ignored } = mapColumns(['E-Mail Address', 'First Name', 'COUNTRY_CODE', 'Notes', 'Old'], {
      'e-mail address': 'email',
      old: '-',
    });
    assert.deepEqual(columns.map((c) => c.field), ['email', 'first_name', 'country_code']);
    assert.deepEqual(ignored, ['Notes']);
  });

  test('values are checked with the API rules; a refused row names its line and field', async () => {
    const { teamId } = await makeTeam(d.db);
    const csv = [
      'email,country_code,custom_dec_1,custom_bool_1,custom_datetime_1,phone',
      'ok@example.com,de,1.5,yes,2025-01-01T00:00:00Z,',
      'c@example.com,ZZ,,,,',
      'd@example.com,,abc,,,',
      'e@example.com,,,maybe,,',
      'f@example.com,,,,0000-01-01T00:00:00Z,',
      `g@example.com,,,,,${'9'.repeat(80)}`,
    ].join('\r\n');
    const s = await run(teamId, csv);
    assert.equal(s.created, 1);
    const rejects = new Map((parse(readFileSync(join(dir, `${teamId}.csv`))) as string[][]).map((r) => [r[0], r[1]]));
    assert.match(rejects.get('3')!, /^country_code must match format "country-code"/);
    assert.match(rejects.get('4')!, /^custom_dec_1 must be a number/);
    assert.match(rejects.get('5')!, /^custom_bool_1 must be true or false/);
    assert.match(rejects.get('6')!, /^custom_datetime_1 must match format "date-time"/);
    assert.match(rejects.get('7')!, /^phone must NOT have more than 64 characters/);
    const ok = await d.db.selectFrom('contacts').selectAll().where('team_id', '=', teamId).executeTakeFirstOrThrow();
    assert.equal(ok.country_code, 'DE');
    assert.equal(ok.custom_bool_1, true);
  });

  test('framing: quoted newlines keep their record and line count; a stray quote loses only its own record', async () => {
    const csv = 'a,b\n"multi\nline",1\n"x"y,2\nplain,3\n';
    const items = [];
    for await (const item of csvRecords(Readable.from([Buffer.from(csv)]))) items.push(item);
    assert.deepEqual(items, [
      { line: 1, record: ['a', 'b'] },
      { line: 2, record: ['multi\nline', '1'] },
      { line: 4, error: 'unreadable CSV: Invalid Closing Quote: got "y"' },
      { line: 5, record: ['plain', '3'] },
    ]);
  });
});
