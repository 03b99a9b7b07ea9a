// Contacts → Import: a CSV upload streamed to disk, imported by a background
// job (contacts/imports.ts) with the CLI's code, and a page that follows it.
//
// The upload is a multipart form in its own scope with its own limit
// (DASHBOARD_IMPORT_LIMIT_BYTES). Nothing of the body is read before the
// request is known good: the session is checked from the cookie before parsing
// (intake.ts), and the CSRF token comes in the query string, so a forged or
// signed-out upload is refused without reading a byte of the file.
import { randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { createImport, findImport, recentImports, rejectsPathOf } from '../contacts/imports.ts';
import { leaveBodyUnread } from '../http/unread-body.ts';
import { queryField, requireUser, signedIn, user, UUID_RE } from './forms.ts';
import { EXPIRED_FORM } from './intake.ts';
import { PageError, pageNotFound } from './page-error.ts';
import { csrfMatches } from './security.ts';
import { render } from './views.ts';

const NEWLINE = 0x0a;

export async function importPages(app: FastifyInstance): Promise<void> {
  const { db, config } = app.deps;
  const limit = config.intake.dashboardImportLimitBytes;
  const dir = join(config.dataDir, 'imports');

  app.get('/contacts/import', signedIn, async (request, reply) => {
    const imports = await recentImports(db, user(request).teamId);
    return render(request, reply, 'contact-import', { imports, limitMib: Math.floor(limit / (1024 * 1024)) });
  });

  app.get<{ Params: { id: string } }>('/contacts/import/:id', signedIn, async (request, reply) => {
    const row = await ownImport(request);
    const finished = row.status === 'done' || row.status === 'failed';
    if (!finished) reply.header('refresh', '2');
    return render(request, reply, 'contact-import-status', { imp: row, finished });
  });

  app.get<{ Params: { id: string } }>('/contacts/import/:id/rejects.csv', signedIn, async (request, reply) => {
    const row = await ownImport(request);
    const path = rejectsPathOf(row.file_path);
    try {
      statSync(path);
    } catch {
      throw pageNotFound();
    }
    return reply
      .type('text/csv; charset=utf-8')
      .header('content-disposition', `attachment; filename="rejects-${row.id}.csv"`)
      .send(createReadStream(path));
  });

  async function ownImport(request: FastifyRequest<{ Params: { id: string } }>) {
    if (!UUID_RE.test(request.params.id)) throw pageNotFound();
    const row = await findImport(db, user(request).teamId, request.params.id);
    if (!row) throw pageNotFound();
    return row;
  }

  await app.register(async (upload) => {
    await upload.register(multipart, {
      limits: { fileSize: limit, files: 1, fields: 4, fieldSize: 100, parts: 6, headerPairs: 50 },
    });
    upload.post(
      '/contacts/import',
      {
        bodyLimit: limit + 64 * 1024,
        // Before the body is parsed: refuseBeforeBody (the plugin's hook) has
        // already sent the signed-out away; a wrong token goes the same way.
        preParsing: async (request: FastifyRequest, reply) => {
          if (!request.dashboardUser) return;
          if (csrfMatches(request, queryField(request.query, '_csrf', 200))) return;
          leaveBodyUnread(request, reply);
          throw new PageError(403, EXPIRED_FORM);
        },
        preHandler: requireUser,
      },
      async (request, reply) => {
        const teamId = user(request).teamId;
        const file = await request.file();
        if (!file) throw new PageError(422, 'Choose a CSV file to import.');
        // The fields before the file part (the form puts the checkbox first).
        const checkbox = file.fields.emit_events;
        const emitEvents = !!checkbox && !Array.isArray(checkbox) && 'value' in checkbox && checkbox.value === '1';
        mkdirSync(dir, { recursive: true });
        const path = join(dir, `${randomUUID()}.csv`);
        let bytes = 0;
        let lines = 0;
        // Lines are counted on the way to disk, for the page's "about N rows".
        const count = new Transform({
          transform(chunk: Buffer, _enc, done) {
            bytes += chunk.length;
            for (let i = chunk.indexOf(NEWLINE); i !== -1; i = chunk.indexOf(NEWLINE, i + 1)) lines++;
            done(null, chunk);
          },
        });
        const tooLarge = () =>
          new PageError(413, `The file is larger than the ${Math.floor(limit / (1024 * 1024))} MiB an upload may have (DASHBOARD_IMPORT_LIMIT_BYTES). Split it, or import it with the CLI.`);
        try {
          await pipeline(file.file, count, createWriteStream(path));
        } catch (err) {
          rmSync(path, { force: true });
          if ((err as { code?: string }).code === 'FST_REQ_FILE_TOO_LARGE') throw tooLarge();
          throw err;
        }
        // busboy stops at the limit and marks the stream truncated: the cut file is not imported.
        if (file.file.truncated) {
          rmSync(path, { force: true });
          throw tooLarge();
        }
        if (bytes === 0) {
          rmSync(path, { force: true });
          throw new PageError(422, 'The file is empty.');
        }
        const fileName = (file.filename || 'upload.csv').slice(0, 255);
        const id = await createImport(db, teamId, { fileName, filePath: path, bytes, rowsEstimate: Math.max(lines - 1, 0), emitEvents });
        return reply.redirect(`/contacts/import/${id}`, 303);
      },
    );
  });
}
