// The node flags of the package's own scripts (`npm start`, `npm run worker`),
// read from package.json, so a bench that runs a process "as deployed" runs it
// with the same flags as the operator's command, from one place.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const scripts = (JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;

/** The `--flags` between `node` and the entry file of a package.json script, e.g. ['--max-semi-space-size=16']. */
export function scriptNodeFlags(script: 'start' | 'worker'): string[] {
  const words = (scripts[script] ?? '').trim().split(/\s+/);
  if (words[0] !== 'node') throw new Error(`package.json script "${script}" does not start with node: ${scripts[script]}`);
  return words.slice(1).filter((w) => w.startsWith('--'));
}
