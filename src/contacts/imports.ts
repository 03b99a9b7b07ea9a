// Imports uploaded through the dashboard: a row per upload, and the
// `contact_import` job that runs the CLI's import code on the stored file.
import { createReadStream, rmSync } from 'node:fs';
import type { Task } from 'graphile-worker';
import type { Db } from '../db/pool.ts';
import { ImportSetupError, importContacts, RejectsSink } from './csv-import.ts';
import { addJobs, JOB_PRIORITY } from '../lib/jobs.ts';

/** Import and retention work waits behind everything live (graphile-worker runs lower numbers first). */
export const IMPORT_JOB_PRIORITY = JOB_PRIORITY.background;
const PROGRESS_EVERY_MS = 1000;

export const rejectsPathOf = (filePath: string) => `${filePath}.rejects.csv`;

export async function createImport(
  db: Db,
  teamId: string,
  input: { fileName: string; filePath: string; bytes: number; rowsEstimate: number; emitEvents: boolean },
): Promise<string> {
  return db.transaction().execute(async (tx) => {
    const { id } = await tx
      .insertInto('contact_imports')
      .values({
        team_id: teamId, file_name: input.fileName, file_path: input.filePath, bytes: input.bytes,
        rows_estimate: input.rowsEstimate, emit_events: input.emitEvents,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    // One attempt, import priority: the job's defaults (lib/jobs.ts).
    await addJobs(tx, 'contact_import', [{ payload: { import_id: id } }]);
    return id;
  });
}

export function findImport(db: Db, teamId: string, id: string) {
  return db.selectFrom('contact_imports').selectAll().where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
}

export function recentImports(db: Db, teamId: string, limit = 20) {
  return db.selectFrom('contact_imports').selectAll().where('team_id', '=', teamId).orderBy('created_at', 'desc').limit(limit).execute();
}

export function contactImportTask(deps: { db: Db; maxTags: number }): Task<'contact_import'> {
  return async (payload) => {
    const importId: unknown = payload.import_id;
    if (typeof importId !== 'string') throw new Error('contact_import: payload without import_id');
    const row = await deps.db
      .updateTable('contact_imports')
      .set({ status: 'running' })
      .where('id', '=', importId)
      .where('status', '=', 'queued')
      .returningAll()
      .executeTakeFirst();
    if (!row) return; // gone (team deleted) or already run
    const update = (values: Record<string, unknown>) =>
      deps.db.updateTable('contact_imports').set(values).where('team_id', '=', row.team_id).where('id', '=', row.id).execute();
    let last = 0;
    let writing: Promise<unknown> = Promise.resolve();
    try {
      const summary = await importContacts({
        db: deps.db,
        teamId: row.team_id,
        input: createReadStream(row.file_path),
        emitEvents: row.emit_events,
        maxTags: deps.maxTags,
        rejects: new RejectsSink(rejectsPathOf(row.file_path)),
        onProgress: (p) => {
          if (Date.now() - last < PROGRESS_EVERY_MS) return;
          last = Date.now();
          writing = writing.then(() => update({ rows_done: p.rows, rejected: p.rejected })).catch(() => {});
        },
      });
      await writing;
      await update({
        status: 'done', rows_done: summary.rows, rejected: summary.rejected, created: summary.created,
        updated: summary.updated, unchanged: summary.unchanged, finished_at: new Date(),
        error: summary.ignored_columns.length ? `ignored columns: ${summary.ignored_columns.join(', ')}` : null,
      });
    } catch (err) {
      await writing;
      const message = err instanceof ImportSetupError ? err.message : `the import stopped: ${(err as Error).message}`;
      await update({ status: 'failed', error: message.slice(0, 1000), finished_at: new Date() });
    } finally {
      rmSync(row.file_path, { force: true });
    }
  };
}
