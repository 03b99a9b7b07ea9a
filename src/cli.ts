// The `plover` admin CLI (run as `npx plover …`). It uses the same database as
// the service: DATABASE_URL, or the embedded one under DATA_DIR (the running
// instance when `npm start` is up, else one started for the command).
import { mkdirSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import libmime from 'libmime';
import { ConfigError, loadConfig } from './config.ts';
import { AppError } from './lib/errors.ts';
import { statusOf } from './http/errors.ts';
import { parseAllowList } from './lib/net-guard.ts';
import { createMailAccount } from './mail/accounts.ts';
import type { MailSecurity } from './mail/transport.ts';
import { migrate } from './db/migrate.ts';
import { openDatabase } from './db/open.ts';
import { createApiKey, createTeam, listApiKeys, listTeams, renameTeam, revokeApiKey, teamNameProblem } from './teams/queries.ts';
import { CliError, EXIT, nonEmpty, packageVersion, positiveInt, print, requireTeam, UsageError, uuid, withDatabase } from './cli-common.ts';
import { contactCommands } from './cli-contacts.ts';
import { createPasswordToken, createUser, MAX_PASSWORD, MIN_PASSWORD, normalizeEmail } from './dashboard/users.ts';
import { isEmail } from './http/schemas.ts';

/**
 * `smtps://user:pass@host[:port]` is implicit TLS (default port 465).
 * `smtp://…` defaults to STARTTLS (port 587): credentials never cross the network
 * in clear unless `--security none` says so (a local relay, a test sink).
 * User and password are URL-decoded.
 */
export function parseSmtpUrl(raw: string, security?: string): {
  host: string; port: number; security: MailSecurity; username?: string; password?: string;
} {
  const usage = '--smtp-url must look like smtp://user:password@host:port or smtps://user:password@host:port';
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(usage);
  }
  if (url.protocol !== 'smtp:' && url.protocol !== 'smtps:') throw new UsageError(`${usage} (got ${url.protocol}//)`);
  if (!url.hostname) throw new UsageError(`${usage} (no host)`);
  if ((url.pathname && url.pathname !== '/') || url.search || url.hash) throw new UsageError(`${usage} (no path, query or fragment)`);
  if (security !== undefined && !['tls', 'starttls', 'none'].includes(security)) {
    throw new UsageError(`--security must be tls, starttls or none, got "${security}"`);
  }
  const implicitTls = url.protocol === 'smtps:';
  if (implicitTls && security !== undefined && security !== 'tls') {
    throw new UsageError(`--security ${security} contradicts smtps:// (implicit TLS); use smtp:// for starttls or none`);
  }
  if (!implicitTls && security === 'tls') throw new UsageError('--security tls means implicit TLS: use an smtps:// URL');
  const decode = (part: string, what: string) => {
    try {
      return decodeURIComponent(part);
    } catch {
      throw new UsageError(`--smtp-url: the ${what} is not valid URL encoding`);
    }
  };
  const username = url.username ? decode(url.username, 'user') : undefined;
  const password = url.password ? decode(url.password, 'password') : undefined;
  return {
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port ? Number(url.port) : implicitTls ? 465 : 587,
    security: implicitTls ? 'tls' : ((security as MailSecurity | undefined) ?? 'starttls'),
    ...(username !== undefined ? { username } : {}),
    ...(password !== undefined ? { password } : {}),
  };
}

// Validation details name API fields; say which option to fix instead.
const CLI_FIELDS: Record<string, string> = {
  host: '--smtp-url host', port: '--smtp-url port', username: '--smtp-url user', password: '--smtp-url password',
  security: '--security', from_email: '--from-email', from_name: '--from-name', daily_limit: '--daily-limit', verify: '--verify:',
};
const cliField = (field: string) => CLI_FIELDS[field] ?? field;

export function buildCli(): Command {
  const program: Command = new Command('plover')
    .description('Plover admin CLI')
    .version(packageVersion(), '-V, --version', 'print the version')
    .exitOverride();
  const json = () => new Option('--json', 'print one JSON object');

  const team = program.command('team').description('teams');
  team
    .command('create')
    .description('create a team and its first API key')
    .argument('<name>', 'team name')
    .addOption(json())
    .action(async (name: string, opts: { json?: boolean }) => {
      const teamName = nonEmpty(name, 'team name');
      const problem = teamNameProblem(teamName);
      if (problem) throw new UsageError(`the team name ${problem}`);
      const out = await withDatabase(async ({ db }) => {
        const t = await createTeam(db, teamName);
        const { key } = await createApiKey(db, t.id, 'default');
        return { team_id: t.id, api_key: key };
      });
      print(!!opts.json, out, `team ${teamName} created\nteam id: ${out.team_id}\nAPI key: ${out.api_key}\n(the key is shown only once)`);
    });

  team
    .command('list')
    .description('list the teams: id, name, live API keys, dashboard users')
    .addOption(json())
    .action(async (opts: { json?: boolean }) => {
      const teams = await withDatabase(({ db }) => listTeams(db));
      const rows = teams.map((t) => ({ id: t.id, name: t.name, created_at: t.created_at.toISOString(), api_keys: t.api_keys, users: t.users }));
      const text = rows.length
        ? rows.map((r) => `${r.id}  ${r.name}  (${r.api_keys} live key${r.api_keys === 1 ? '' : 's'}, ${r.users} user${r.users === 1 ? '' : 's'}, created ${r.created_at})`).join('\n')
        : 'no teams (create one: plover team create <name>)';
      print(!!opts.json, { teams: rows }, text);
    });
  team
    .command('rename')
    .description('rename a team (recipients read the name on the unsubscribe page)')
    .argument('<team-id>', 'team id (from team list)')
    .argument('<name>', 'the new name, 1 to 200 characters')
    .addOption(json())
    .action(async (teamId: string, name: string, opts: { json?: boolean }) => {
      const id = uuid(teamId, 'team id');
      const newName = name.trim();
      const problem = teamNameProblem(newName);
      if (problem) throw new UsageError(`the team name ${problem}`);
      const renamed = await withDatabase(({ db }) => renameTeam(db, id, newName));
      if (!renamed) throw new CliError(`no team with id ${id}`);
      print(!!opts.json, { team_id: id, name: newName }, `team ${id} renamed to ${newName}`);
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

  const user = program.command('user').description('dashboard users');
  user
    .command('create')
    .description('create a dashboard user of a team (without --password, prints a one-time link to set it)')
    .requiredOption('--team <id>', 'team id')
    .requiredOption('--email <address>', 'the e-mail the user signs in with')
    .option('--password <password>', `at least ${MIN_PASSWORD} characters`)
    .addOption(json())
    .action(async (opts: { team: string; email: string; password?: string; json?: boolean }) => {
      const teamId = uuid(opts.team, '--team');
      const email = normalizeEmail(opts.email);
      if (!isEmail(email)) throw new UsageError(`--email must be an e-mail address, got "${opts.email}"`);
      if (opts.password !== undefined && (opts.password.length < MIN_PASSWORD || opts.password.length > MAX_PASSWORD)) {
        throw new UsageError(`--password must be ${MIN_PASSWORD} to ${MAX_PASSWORD} characters`);
      }
      const config = loadConfig();
      const out = await withDatabase(async (database) => {
        await requireTeam(database, teamId);
        try {
          const created = await createUser(database.db, teamId, email, opts.password ?? null);
          const link = opts.password === undefined
            ? `${config.publicUrl}/set-password?token=${await createPasswordToken(database.db, teamId, created.id)}`
            : null;
          return { user_id: created.id, team_id: teamId, email, set_password_url: link };
        } catch (err) {
          if ((err as { code?: string }).code === '23505') throw new CliError(`a user with the e-mail ${email} already exists`);
          throw err;
        }
      });
      const text = out.set_password_url
        ? `user ${out.user_id} created\nset the password (one-time link): ${out.set_password_url}`
        : `user ${out.user_id} created: sign in at ${config.publicUrl}/sign-in`;
      print(!!opts.json, out, text);
    });

  user
    .command('password-link')
    .description("print a one-time link (7 days) that sets a user's password and signs them out everywhere")
    .requiredOption('--email <address>', 'the user\'s e-mail')
    .addOption(json())
    .action(async (opts: { email: string; json?: boolean }) => {
      const email = normalizeEmail(opts.email);
      const config = loadConfig();
      const out = await withDatabase(async ({ db }) => {
        const found = await db.selectFrom('dashboard_users').select(['id', 'team_id']).where('email', '=', email).executeTakeFirst();
        if (!found) throw new CliError(`no user with the e-mail ${email}`);
        const token = await createPasswordToken(db, found.team_id, found.id);
        return { user_id: found.id, set_password_url: `${config.publicUrl}/set-password?token=${token}` };
      });
      print(!!opts.json, out, `set the password (one-time link): ${out.set_password_url}`);
    });

  const mailAccount = program.command('mail-account').description('SMTP accounts of a team');
  mailAccount
    .command('create')
    .description('add an SMTP account to a team (the password is stored encrypted)')
    .requiredOption('--team <id>', 'team id')
    .requiredOption('--smtp-url <url>', 'smtp://user:password@host:port (STARTTLS, port 587) or smtps://… (implicit TLS, port 465)')
    .requiredOption('--from-email <address>', 'sender address')
    .option('--from-name <name>', 'sender name')
    .option('--daily-limit <n>', 'e-mails per UTC day (default 500)')
    .option('--security <mode>', 'tls, starttls or none (default: tls for smtps://, starttls for smtp://)')
    .option('--verify', 'log in to the server before saving; nothing is saved if that fails')
    .addOption(json())
    .action(
      async (opts: {
        team: string; smtpUrl: string; fromEmail: string; fromName?: string; dailyLimit?: string;
        security?: string; verify?: boolean; json?: boolean;
      }) => {
        const teamId = uuid(opts.team, '--team');
        const smtp = parseSmtpUrl(opts.smtpUrl, opts.security);
        const input = {
          ...smtp,
          from_email: opts.fromEmail.trim(),
          ...(opts.fromName !== undefined ? { from_name: opts.fromName } : {}),
          ...(opts.dailyLimit !== undefined ? { daily_limit: positiveInt(opts.dailyLimit, '--daily-limit') } : {}),
          verify: !!opts.verify,
        };
        const account = await withDatabase(async (database) => {
          await requireTeam(database, teamId);
          try {
            // The API's host rules, with the operator's ALLOWED_PRIVATE_TARGETS.
            const allow = parseAllowList(loadConfig().allowedPrivateTargets);
            return await createMailAccount(database.db, database.appSecret, teamId, input, { allow });
          } catch (err) {
            if (!(err instanceof AppError)) throw err;
            const message = `${err.message}: ${(err.details ?? []).map((d) => `${cliField(d.field)} ${d.message}`).join('; ')}`;
            // A refused login is the operation failing; any other detail is an option the operator got wrong.
            const usage = statusOf(err.code) === 422 && !(err.details ?? []).some((d) => d.field === 'verify');
            throw usage ? new UsageError(message) : new CliError(message);
          }
        });
        print(
          !!opts.json,
          { mail_account_id: account.id },
          `mail account ${account.id} created: ${account.security} ${account.host}:${account.port}, from ${account.from_email}`,
        );
      },
    );

  contactCommands(program);

  program
    .command('dev-smtp')
    .description('run a local SMTP sink for development: accepts every message (any login), prints it and/or stores .eml files')
    .option('--port <n>', 'port to listen on (0: any free port)', '2525')
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--out <dir>', 'store each message as <dir>/<time>-<n>.eml (then only a summary is printed)')
    .option('--print', 'print the whole message even with --out')
    .action(async (opts: { port: string; host: string; out?: string; print?: boolean }) => {
      const port = positiveInt(opts.port, '--port');
      if (port > 65535) throw new UsageError('--port must be at most 65535');
      const { port: bound } = await startDevSmtp({ port, host: opts.host, out: opts.out, print: !!opts.print || !opts.out });
      process.stdout.write(
        `dev SMTP sink listening on ${opts.host}:${bound}` + (opts.out ? `, storing messages in ${resolve(opts.out)}` : '') + '\n' +
          `mail account for it: --smtp-url smtp://dev:dev@${opts.host}:${bound} --security none\n`,
      );
    });

  program
    .command('migrate')
    .description('apply pending database migrations')
    .addOption(json())
    .action(async (opts: { json?: boolean }) => {
      const config = loadConfig();
      const database = await openDatabase(config, () => {}, 2);
      try {
        const applied = await migrate(database.pool);
        print(!!opts.json, { applied }, applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
      } finally {
        await database.close();
      }
    });
  return program;
}

/**
 * A local SMTP server that accepts everything (no TLS, any login) and shows
 * what it gets: a newcomer sees the engine's e-mail without an outside service.
 * smtp-server is a development dependency, loaded only by this command.
 */
export async function startDevSmtp(opts: { port: number; host: string; out?: string; print: boolean }): Promise<{ port: number; close(): Promise<void> }> {
  const { SMTPServer } = await import('smtp-server').catch(() => {
    throw new CliError('dev-smtp needs the smtp-server package (a development dependency): run npm install without --omit=dev');
  });
  if (opts.out) mkdirSync(opts.out, { recursive: true });
  let n = 0;
  const server = new SMTPServer({
    secure: false,
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    authOptional: true,
    logger: false,
    closeTimeout: 1_000,
    onAuth: (_auth, _session, callback) => callback(null, { user: 'dev' }),
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        n += 1;
        const raw = Buffer.concat(chunks);
        const head = raw.toString('utf8').split(/\r?\n\r?\n/, 1)[0].replace(/\r?\n[ \t]+/g, ' ');
        // RFC 2047 encoded words (=?UTF-8?B?…?=, as nodemailer writes any non-ASCII subject) decoded for reading.
        const subject = decodeSubject(/^subject: *(.*)$/im.exec(head)?.[1] ?? '');
        const from = session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
        const to = session.envelope.rcptTo.map((r) => r.address).join(', ');
        let line = `--- message ${n}: from ${from} to ${to}, ${raw.length} bytes, subject: ${subject}`;
        if (opts.out) {
          const file = join(opts.out, `${new Date().toISOString().replace(/[:.]/g, '-')}-${n}.eml`);
          writeFileSync(file, raw);
          line += `\n    saved to ${file}`;
        }
        process.stdout.write(line + '\n' + (opts.print ? raw.toString('utf8') + '\n' : ''));
        callback();
      });
    },
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(opts.port, opts.host, () => ok());
  });
  return {
    port: (server.server.address() as AddressInfo).port,
    close: () => new Promise<void>((ok) => server.close(() => ok())),
  };
}

/** A Subject header's value as a person reads it: RFC 2047 encoded words decoded (libmime), unknown charsets left as they are. */
export function decodeSubject(raw: string): string {
  try {
    return libmime.decodeWords(raw);
  } catch {
    return raw;
  }
}

/** The process exit code for an error thrown by a command. */
export function exitCodeOf(err: unknown): number {
  // --help and --version end through exitOverride with code 0; every other
  // commander error (unknown command or option, missing argument) is usage.
  if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  if (err instanceof UsageError || err instanceof ConfigError) return EXIT.usage;
  return EXIT.failure;
}

if (import.meta.main) {
  try {
    await buildCli().parseAsync(process.argv);
  } catch (err) {
    if (!(err instanceof CommanderError)) {
      const msg = err instanceof ConfigError ? `configuration error: ${err.message}`
        : err instanceof CliError ? err.message : `unexpected error: ${(err as Error).message}`;
      process.stderr.write(`plover: ${msg}\n`);
    }
    process.exit(exitCodeOf(err));
  }
}
