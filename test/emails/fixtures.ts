// Shared set-up of the transactional e-mail tests: a team with a mail account
// on a capturing SMTP sink (127.0.0.1), a template, and request helpers that
// can send headers (Idempotency-Key).
import { sql } from 'kysely';
import { makeTeam, type TestApp } from '../helpers.ts';
import { createTemplate, insertAccount } from '../engine/fixtures.ts';
import { api } from '../engine/fixtures.ts';

type Inject = { statusCode: number; json(): any; body: string };

export function client(t: TestApp, key: string) {
  const headers = { 'x-api-key': key };
  return {
    post: (url: string, payload: unknown, extra: Record<string, string> = {}): Promise<Inject> =>
      t.app.inject({ method: 'POST', url: `/public/v1${url}`, headers: { ...headers, ...extra }, payload: payload as object }),
    get: (url: string): Promise<Inject> => t.app.inject({ method: 'GET', url: `/public/v1${url}`, headers }),
  };
}

export type Tx = {
  teamId: string;
  key: string;
  c: ReturnType<typeof client>;
  accountId: string;
  templateId: string;
};

export async function txSetup(
  t: TestApp,
  port: number,
  template: Record<string, unknown> = {},
  account: Parameters<typeof insertAccount>[3] = {},
): Promise<Tx> {
  const { teamId, key } = await makeTeam(t.database.db);
  const accountId = await insertAccount(t, teamId, port, account);
  const templateId = await createTemplate(api(t, key), {
    name: 'Receipt',
    subject: 'Order {{ order_id }}',
    content: '<html><body><p>Hi {{ contact.first_name | default: "there" }}, order {{ order_id }} ({{ variables.total }})</p></body></html>',
    ...template,
  });
  return { teamId, key, c: client(t, key), accountId, templateId };
}

export async function rowsOf(t: TestApp, teamId: string) {
  return t.database.db.selectFrom('email_send_log').selectAll().where('team_id', '=', teamId).orderBy('created_at').orderBy('id').execute();
}

/** send_email jobs waiting for these rows (graphile-worker's table). */
export async function sendJobsFor(t: TestApp, ids: string[]) {
  const { rows } = await sql<{ payload: any; run_at: Date; priority: number; key: string | null }>`
    SELECT payload, run_at, priority, key FROM graphile_worker._private_jobs j
      JOIN graphile_worker._private_tasks k ON k.id = j.task_id
     WHERE k.identifier = 'send_email'`.execute(t.database.db);
  const wanted = new Set(ids);
  return rows.filter((r) => [...(r.payload.email_send_log_ids ?? []), r.payload.email_send_log_id].some((id) => wanted.has(id)));
}
