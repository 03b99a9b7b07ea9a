// A test reporter (scripts/test.ts adds it beside the spec reporter) that checks
// that every test the runner was told about got a verdict. Node's runner can
// drop the last verdicts of a file and still exit 0 (nodejs/node#64833): the
// test:enqueue events of a file reach the runner when the file is loaded, its
// test:pass/test:fail ones as tests end, so a truncated stream shows as
// enqueued tests without a verdict. A file whose process ends before its
// reporter has written anything (process.exit in a test, or in code under test)
// is reported by the runner as one passing entry with no tests in it, so a file
// without a single test verdict counts as missing too. The reporter writes one
// JSON line ({enqueued, verdicts, missing: [names]}) to its destination;
// scripts/test.ts fails the run when `missing` is not empty.
import type { TestEvent } from 'node:test/reporters';

type Where = { name: string; nesting: number; file?: string; line?: number; column?: number };

const key = (d: Where) => `${d.file ?? ''}:${d.line ?? 0}:${d.column ?? 0}:${d.nesting}:${d.name}`;

/** The runner's own entry for a whole file (no verdict unless the file itself fails). */
const isFileEntry = (d: Where) => d.nesting === 0 && d.line === 1 && d.column === 1 && !!d.file && d.file.endsWith(d.name);

export default async function* verdicts(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const enqueued = new Map<string, Where>();
  const decided = new Set<string>();
  const files = new Set<string>();
  const filesWithVerdicts = new Set<string>();
  for await (const event of source) {
    if (event.type === 'test:enqueue') {
      const d = event.data as Where;
      if (isFileEntry(d)) files.add(d.file!);
      else enqueued.set(key(d), d);
    } else if (event.type === 'test:pass' || event.type === 'test:fail') {
      const d = event.data as Where;
      decided.add(key(d));
      if (!isFileEntry(d) && d.file) filesWithVerdicts.add(d.file);
    }
  }
  const missing = [
    ...[...enqueued].filter(([k]) => !decided.has(k)).map(([, d]) => `${d.file ?? '?'}: ${d.name}`),
    ...[...files].filter((f) => !filesWithVerdicts.has(f)).map((f) => `${f}: no test of this file reported a verdict`),
  ];
  yield `${JSON.stringify({ enqueued: enqueued.size, verdicts: decided.size, missing })}\n`;
}
