// CSV records with their line numbers, surviving malformed rows.
//
// csv-parse does the parsing, but it does not find its feet again after a
// malformed record: with skip_records_with_error, one `"x"y` row made it drop
// or misread every row after it (measured: of 10 rows with one bad, 3 came
// out). So records are framed first, by hand, with the RFC 4180 rule that a
// newline ends a record when the quotes before it are balanced, and csv-parse
// then reads a block of framed records at once (a whole block in one call:
// per-record calls cost more than the database write). A block that fails is
// read again record by record, so only the bad record is lost, and reported.
import { StringDecoder } from 'node:string_decoder';
import { parse } from 'csv-parse/sync';

export type CsvItem = { line: number; record: string[] } | { line: number; error: string };

const BLOCK = 500;
const countQuotes = (s: string, from: number, to: number) => {
  let n = 0;
  for (let i = s.indexOf('"', from); i !== -1 && i < to; i = s.indexOf('"', i + 1)) n++;
  return n;
};

function parseBlock(texts: string[], lines: number[]): CsvItem[] {
  const opts = { relax_column_count: true, skip_empty_lines: false } as const;
  try {
    const records = parse(texts.join('\n'), opts) as string[][];
    if (records.length === texts.length) return records.map((record, i) => ({ line: lines[i], record }));
  } catch {
    // some record of the block is malformed: find which below
  }
  return texts.map((text, i) => {
    try {
      const records = parse(text, opts) as string[][];
      return records.length === 1 ? { line: lines[i], record: records[0] } : { line: lines[i], error: 'unreadable CSV: not one record' };
    } catch (err) {
      // A record over several lines names them all: an unbalanced quote takes the lines up to the next quote with it.
      const extra = text.split('\n').length - 1;
      const where = extra ? ` (lines ${lines[i]} to ${lines[i] + extra})` : '';
      return { line: lines[i], error: `unreadable CSV${where}: ${(err as Error).message.replace(/ at line \d+.*$/s, '')}` };
    }
  });
}

/**
 * Records of a CSV stream, in order, each with the line it starts on; a record
 * csv-parse refuses comes as an error item instead. Blank lines are skipped. A
 * record longer than `maxRecordBytes` (an unclosed quote swallowing the file)
 * is an error item, and reading goes on at the line after its start.
 */
export async function* csvRecords(input: AsyncIterable<Buffer>, maxRecordBytes = 1 << 20): AsyncGenerator<CsvItem> {
  const decoder = new StringDecoder('utf8');
  let buf = '';
  let line = 1; // the line `buf` starts on
  let first = true;
  let texts: string[] = [];
  let starts: number[] = [];
  const take = function* (final: boolean): Generator<CsvItem> {
    let pos = 0;
    let quotes = 0;
    let scanned = 0;
    let nlInRecord = 0;
    // An unbalanced quote: report the record's first line and frame again from the next one.
    const drain = function* () {
      if (texts.length) yield* parseBlock(texts, starts);
      texts = [];
      starts = [];
    };
    const resync = (why: string): CsvItem => {
      const next = buf.indexOf('\n', pos);
      const item = { line, error: `unreadable CSV: ${why}` };
      line++;
      pos = scanned = next === -1 ? buf.length : next + 1;
      quotes = nlInRecord = 0;
      return item;
    };
    for (;;) {
      const nl = buf.indexOf('\n', scanned);
      if (nl === -1) {
        const open = (quotes + countQuotes(buf, scanned, buf.length)) % 2 === 1;
        if (!final || !open) break;
        // At the end of the file a quote is still open: only its own line is lost.
        yield* drain();
        yield resync('a quoted field is never closed');
        continue;
      }
      quotes += countQuotes(buf, scanned, nl);
      scanned = nl + 1;
      if (quotes % 2 === 1) {
        nlInRecord++;
        if (scanned - pos > maxRecordBytes) yield* drain();
        if (scanned - pos > maxRecordBytes) yield resync(`a quoted field is never closed (record longer than ${maxRecordBytes} bytes)`);
        continue;
      }
      const text = buf.slice(pos, nl).replace(/\r$/, '');
      if (text.trim() !== '') {
        texts.push(text);
        starts.push(line);
      }
      line += nlInRecord + 1;
      pos = scanned;
      quotes = nlInRecord = 0;
      if (texts.length >= BLOCK) yield* drain();
    }
    buf = buf.slice(pos);
    if (final && buf.trim() !== '') {
      texts.push(buf.replace(/\r$/, ''));
      starts.push(line);
      buf = '';
    }
    if (final) yield* drain();
  };
  for await (const chunk of input) {
    buf += decoder.write(chunk);
    if (first && buf.length > 0) {
      if (buf.charCodeAt(0) === 0xfeff) buf = buf.slice(1);
      first = false;
    }
    yield* take(false);
  }
  buf += decoder.end();
  yield* take(true);
}
