// `plover contacts import` and `plover contacts export`.
import { createReadStream, createWriteStream, rmSync, statSync } from 'node:fs';
import { once } from 'node:events';
import cliProgress from 'cli-progress';
import { Option, type Command } from 'commander';
import { loadConfig } from './config.ts';
import { exportContacts } from './contacts/csv-export.ts';
import { IMPORT_IN_FLIGHT, ImportSetupError, importContacts, RejectsSink, type ImportProgress } from './contacts/csv-import.ts';
import { CliError, print, requireTeam, UsageError, uuid, withDatabase } from './cli-common.ts';

const collect = (value: string, previous: string[]) => [...previous, value];

export function defaultRejectsPath(file: string): string {
  return file.replace(/\.csv$/i, '') + '.rejects.csv';
}

function parseMap(pairs: string[]): Record<string, string> {
  const map: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.lastIndexOf('=');
    if (at <= 0 || at === pair.length - 1) throw new UsageError(`--map must look like "CSV header=field", got "${pair}"`);
    map[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return map;
}

/**
 * A bar with rate and ETA on a terminal; on a pipe or a log file, a plain line
 * every 5 seconds (a bar's carriage returns would be noise there).
 */
function progressReporter(totalBytes: number): { update(p: ImportProgress): void; stop(): void } {
  const started = Date.now();
  const rate = (rows: number) => Math.round(rows / Math.max((Date.now() - started) / 1000, 0.001));
  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        format: 'importing [{bar}] {percentage}% | {rows} rows | {rate} rows/s | {rejected} rejected | ETA {eta_formatted}',
        stream: process.stderr,
        etaBuffer: 50,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(Math.max(totalBytes, 1), 0, { rows: 0, rate: 0, rejected: 0 });
    return {
      update: (p) => bar.update(p.bytes, { rows: p.rows, rate: rate(p.rows), rejected: p.rejected }),
      stop: () => bar.stop(),
    };
  }
  let last = started;
  return {
    update(p) {
      if (Date.now() - last < 5000) return;
      last = Date.now();
      const pct = totalBytes ? Math.floor((100 * p.bytes) / totalBytes) : 0;
      process.stderr.write(`importing: ${p.rows} rows (${rate(p.rows)} rows/s), ${p.rejected} rejected, ${pct}% of the file\n`);
    },
    stop() {},
  };
}

export function contactCommands(program: Command): void {
  const contacts = program.command('contacts').description("a team's contacts: CSV import and export");
  contacts
    .command('import')
    .description('import contacts from a CSV file (header row first); bad rows go to a rejects file, the rest is imported')
    .argument('<file>', 'the CSV file')
    .requiredOption('--team <id>', 'team id')
    .option('--map <header=field>', 'read a column as a contact field, or "-" to ignore it (repeatable)', collect, [])
    .option('--tag <tag>', 'add this tag to every imported contact (repeatable)', collect, [])
    .option('--tag-separator <sep>', 'separator of the tags column', ';')
    .option('--rejects <file>', 'where refused rows go (default: FILE.rejects.csv)')
    .option('--dry-run', 'check every row and report the counts; write nothing')
    .option('--emit-events', 'emit contact.saved for each imported contact (webhooks, campaign triggers); off by default')
    .addOption(new Option('--json', 'print one JSON object'))
    .action(
      async (
        file: string,
        opts: { team: string; map: string[]; tag: string[]; tagSeparator: string; rejects?: string; dryRun?: boolean; emitEvents?: boolean; json?: boolean },
      ) => {
        const teamId = uuid(opts.team, '--team');
        const map = parseMap(opts.map);
        if (opts.tagSeparator === '') throw new UsageError('--tag-separator must not be empty');
        let size: number;
        try {
          size = statSync(file).size;
        } catch {
          throw new CliError(`cannot read ${file}`);
        }
        const rejectsPath = opts.rejects ?? defaultRejectsPath(file);
        const maxTags = loadConfig().contactMaxTags;
        const summary = await withDatabase(async (database) => {
          await requireTeam(database, teamId);
          // The rejects file is this run's output: an old one would be read as this run's.
          rmSync(rejectsPath, { force: true });
          const progress = progressReporter(size);
          try {
            return await importContacts({
              db: database.db, teamId, input: createReadStream(file), map, tags: opts.tag, tagSeparator: opts.tagSeparator,
              dryRun: !!opts.dryRun, emitEvents: !!opts.emitEvents, maxTags, rejects: new RejectsSink(rejectsPath),
              onProgress: (p) => progress.update(p),
            });
          } catch (err) {
            if (err instanceof ImportSetupError) throw new UsageError(err.message);
            throw err;
          } finally {
            progress.stop();
          }
        }, IMPORT_IN_FLIGHT + 1);
        const out = { ...summary, rejects_file: summary.rejected ? rejectsPath : null };
        const text = [
          `${opts.dryRun ? 'dry run: ' : ''}${summary.rows} rows read, ${summary.imported} ${opts.dryRun ? 'valid' : 'imported'}` +
            (opts.dryRun ? '' : ` (${summary.created} created, ${summary.updated} updated, ${summary.unchanged} unchanged)`) +
            `, ${summary.rejected} rejected`,
          ...(summary.rejected ? [`rejected rows (line and reason): ${rejectsPath}`] : []),
          ...(summary.ignored_columns.length ? [`ignored columns: ${summary.ignored_columns.join(', ')}`] : []),
        ].join('\n');
        print(!!opts.json, out, text);
      },
    );

  contacts
    .command('export')
    .description("write a team's contacts as CSV (all fields, tags `;`-separated) to stdout or --output")
    .requiredOption('--team <id>', 'team id')
    .option('--output <file>', 'write to this file instead of stdout')
    .action(async (opts: { team: string; output?: string }) => {
      const teamId = uuid(opts.team, '--team');
      await withDatabase(async (database) => {
        await requireTeam(database, teamId);
        const out = opts.output ? createWriteStream(opts.output) : process.stdout;
        const n = await exportContacts(database.db, teamId, out);
        if (opts.output) {
          out.end();
          await once(out, 'close');
        }
        process.stderr.write(`${n} contacts exported\n`);
      });
    });
}
