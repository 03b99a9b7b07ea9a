// The `plover` admin CLI (run as `npx plover …`). It uses the same database as
// the service: DATABASE_URL, or the embedded one under DATA_DIR (the running
// instance when `npm start` is up, else one started for the command).
import { Command, CommanderError, Option } from 'commander';
import { ConfigError, loadConfig } from './config.ts';
import { migrate } from './db/migrate.ts';
import { openDatabase, type Database } from './db/open.ts';
import { createApiKey, createTeam, listApiKeys, revokeApiKey, teamExists } from './teams/queries.ts';

class CliError extends Error {}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function uuid(value: string, what: string): string {
  if (!UUID_RE.test(value)) throw new CliError(`${what} must be a UUID, got "${value}"`);
  return value.toLowerCase();
}

function nonEmpty(value: string, what: string): string {
  const v = value.trim();
  if (!v || v.length > 200) throw new CliError(`${what} must be 1 to 200 characters`);
  return v;
}

async function withDatabase<T>(fn: (database: Database) => Promise<T>): Promise<T> {
  const config = loadConfig();
  const database = await openDatabase(config, () => {}, 2);
  try {
    await migrate(database.pool);
    return await fn(database);
  } finally {
    await database.close();
  }
}

function print(json: boolean, object: unknown, text: string): void {
  process.stdout.write(json ? JSON.stringify(object) + '\n' : text + '\n');
}

async function requireTeam(database: Database, teamId: string): Promise<void> {
  if (!(await teamExists(database.db, teamId))) throw new CliError(`no team with id ${teamId}`);
}

export function buildCli(): Command {
  const program = new Command('plover').description('Plover admin CLI').exitOverride();
  const json = () => new Option('--json', 'print one JSON object');

  const team = program.command('team').description('teams');
  team
    .command('create')
    .description('create a team and its first API key')
    .argument('<name>', 'team name')
    .addOption(json())
    .action(async (name: string, opts: { json?: boolean }) => {
      const teamName = nonEmpty(name, 'team name');
      const out = await withDatabase(async ({ db }) => {
        const t = await createTeam(db, teamName);
        const { key } = await createApiKey(db, t.id, 'default');
        return { team_id: t.id, api_key: key };
      });
      print(!!opts.json, out, `team ${teamName} created\nteam id: ${out.team_id}\nAPI key: ${out.api_key}\n(the key is shown only once)`);
    });

  const key = program.command('key').description('API keys');
  key
    .command('create')
    .description('create an API key for a team')
    .requiredOption('--team <id>', 'team id')
    .requiredOption('--name <name>', 'a descriptive name for the key')
    .addOption(json())
    .action(async (opts: { team: string; name: string; json?: boolean }) => {
      const teamId = uuid(opts.team, '--team');
      const name = nonEmpty(opts.name, '--name');
      const out = await withDatabase(async (database) => {
        await requireTeam(database, teamId);
        const { key: apiKey, info } = await createApiKey(database.db, teamId, name);
        return { key_id: info.id, team_id: teamId, name, api_key: apiKey };
      });
      print(!!opts.json, out, `key ${out.key_id} created\nAPI key: ${out.api_key}\n(the key is shown only once)`);
    });
  key
    .command('list')
    .description("list a team's API keys (never the keys themselves)")
    .requiredOption('--team <id>', 'team id')
    .addOption(json())
    .action(async (opts: { team: string; json?: boolean }) => {
      const teamId = uuid(opts.team, '--team');
      const keys = await withDatabase(async (database) => {
        await requireTeam(database, teamId);
        return listApiKeys(database.db, teamId);
      });
      const rows = keys.map((k) => ({
        id: k.id,
        name: k.name,
        prefix: k.prefix,
        created_at: k.created_at.toISOString(),
        last_used_at: k.last_used_at?.toISOString() ?? null,
        revoked_at: k.revoked_at?.toISOString() ?? null,
      }));
      const text = rows.length
        ? rows.map((r) => `${r.id}  ${r.prefix}…  ${r.name}  created ${r.created_at}  last used ${r.last_used_at ?? 'never'}${r.revoked_at ? `  REVOKED ${r.revoked_at}` : ''}`).join('\n')
        : 'no keys';
      print(!!opts.json, { keys: rows }, text);
    });
  key
    .command('revoke')
    .description('revoke an API key (refused everywhere within 5 seconds)')
    .argument('<key-id>', 'key id (from key list)')
    .addOption(json())
    .action(async (keyId: string, opts: { json?: boolean }) => {
      const id = uuid(keyId, 'key id');
      const revoked = await withDatabase(({ db }) => revokeApiKey(db, id));
      if (!revoked) throw new CliError(`no live key with id ${id}`);
      print(!!opts.json, { key_id: id, revoked: true }, `key ${id} revoked`);
    });

  program
    .command('migrate')
    .description('apply pending database migrations')
    .action(async () => {
      const config = loadConfig();
      const database = await openDatabase(config, () => {}, 2);
      try {
        const applied = await migrate(database.pool);
        print(false, {}, applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
      } finally {
        await database.close();
      }
    });
  return program;
}

if (import.meta.main) {
  try {
    await buildCli().parseAsync(process.argv);
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    const msg = err instanceof CliError || err instanceof ConfigError ? err.message : `unexpected error: ${(err as Error).message}`;
    process.stderr.write(`plover: ${msg}\n`);
    process.exit(1);
  }
}
