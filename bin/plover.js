#!/usr/bin/env node
// Launcher for the `plover` CLI. It may be started by an older system Node
// (npx resolves the shebang against PATH), so it re-executes the CLI on the
// Node 24 that the project installs from the npm registry (`node` package),
// which runs TypeScript natively.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const major = Number(process.versions.node.split('.')[0]);
const bundled = join(root, 'node_modules', 'node', 'bin', 'node');
const nodeBin = major >= 24 || !existsSync(bundled) ? process.execPath : bundled;
// A small young generation: a CSV import allocates fast and briefly, and V8's
// default semi-spaces let the heap reserve ~100 MB of garbage (peak RSS of a
// 60,000-row import 276 MB by default, 192 MB with 2 MB semi-spaces, same speed).
const NODE_FLAGS = ['--max-semi-space-size=2'];
const result = spawnSync(nodeBin, [...NODE_FLAGS, join(root, 'src', 'cli.ts'), ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(result.status ?? 1);
