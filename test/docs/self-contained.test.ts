// The repository stands alone: no source file, comment, OpenAPI text, error
// text, document or test cites the specification files it was built from
// (which a user of the repository does not have) or a path outside it. The
// contract is described in our own words in docs/api.md and docs/decisions.md.
// This is the grep for the name of that file over src, docs, README.md,
// test, bench and scripts, kept true by a test.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';

const root = join(import.meta.dirname, '..', '..');
const ROOTS = ['src', 'docs', 'README.md', 'test', 'bench', 'scripts'];
// Built from parts, so this file does not match itself.
const FORBIDDEN = [['interface', 'md'].join('.'), ['', 'work', 'shared', ''].join('/'), ['DESIGN', 'md'].join('.')];

function files(path: string): string[] {
  if (statSync(path).isFile()) return [path];
  return readdirSync(path).flatMap((name) => (name === 'node_modules' ? [] : files(join(path, name))));
}

test('no file cites a specification outside the repository', () => {
  const all = ROOTS.flatMap((r) => files(join(root, r)));
  assert.ok(all.length > 100, `only ${all.length} files read`);
  const hits: string[] = [];
  for (const file of all) {
    const text = readFileSync(file, 'utf8');
    text.split('\n').forEach((line, i) => {
      for (const word of FORBIDDEN) if (line.includes(word)) hits.push(`${relative(root, file)}:${i + 1}: ${line.trim().slice(0, 160)}`);
    });
  }
  assert.deepEqual(hits, []);
});

test('the contract page exists and the docs point to it', () => {
  const api = readFileSync(join(root, 'docs', 'api.md'), 'utf8');
  for (const heading of ['## Envelope and errors', '## Pages', '## Contacts', '## Templates', '## Campaigns', '### Webhook payloads', '### Signatures', '### Retries']) {
    assert.ok(api.includes(heading), `docs/api.md has ${heading}`);
  }
  assert.match(readFileSync(join(root, 'README.md'), 'utf8'), /docs\/api\.md/);
});
