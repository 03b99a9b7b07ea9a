// What every `plover` command shares: exit codes, argument checks, the database.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from './config.ts';
import { migrate } from './db/migrate.ts';
import { openDatabase, type Database } from './db/open.ts';
import { teamExists } from './teams/queries.ts';
import { UUID_RE } from './lib/uuid.ts';

/** The operation failed (exit 1). */
export class CliError extends Error {}
/** The command line is wrong: a malformed option or argument (exit 2, as commander's own usage errors). */
export class UsageError extends CliError {}

/** Exit codes, the same for every command. */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

export function packageVersion(): string {
  return (JSON.parse(readFileSync(join(import.meta.dirname, '..', 'package.json'), 'utf8')) as { version: string }).version;
}

export function uuid(value: string, what: string): string {
  if (!UUID_RE.test(value)) throw new UsageError(`${what} must be a UUID, got "${value}"`);
  return value.toLowerCase();
}

export function nonEmpty(value: string, what: string): string {
  const v = value.trim();
  if (!v || v.length > 200) throw new UsageError(`${what} must be 1 to 200 characters`);
  return v;
}

export async function withDatabase<T>(fn: (database: Database) => Promise<T>, poolSize = 2): Promise<T> {
  const config = loadConfig();
  const database = await openDatabase(config, () => {}, poolSize);
  try {
    await migrate(database.pool);
    return await fn(database);
  } finally {
    await database.close();
  }
}

export function print(json: boolean, object: unknown, text: string): void {
  process.stdout.write(json ? JSON.stringify(object) + '\n' : text + '\n');
}

export function positiveInt(value: string, what: string): number {
  if (!/^\d+$/.test(value.trim())) throw new UsageError(`${what} must be a whole number, got "${value}"`);
  return Number(value.trim());
}

export async function requireTeam(database: Database, teamId: string): Promise<void> {
  if (!(await teamExists(database.db, teamId))) throw new CliError(`no team with id ${teamId}`);
}

