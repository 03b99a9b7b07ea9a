// Shared set-up for the campaign tests. Templates and mail accounts are inserted
// as rows (their API is not what these tests are about).
import { sql } from 'kysely';
import type { Db } from '../../src/db/pool.ts';
import { makeTeam, type TestApp } from '../helpers.ts';

export const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
export const BASE = '/public/v1/email/campaigns';

export async function insertTemplate(db: Db, teamId: string, status: 'active' | 'archived' = 'active'): Promise<string> {
  const row = await db
    .insertInto('templates')
    .values({ team_id: teamId, name: `t-${status}`, content: '<p>Hi {{ contact.first_name }}</p>', status })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export async function insertMailAccount(db: Db, teamId: string, status: 'active' | 'disabled' = 'active'): Promise<string> {
  const row = await db
    .insertInto('mail_accounts')
    .values({ team_id: teamId, host: 'smtp.example.com', port: 587, security: 'starttls', from_email: 'news@example.com', status })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export type Fixture = { teamId: string; key: string; templateId: string; accountId: string };

/** A new team with one active template and one active mail account. */
export async function makeFixture(t: TestApp): Promise<Fixture> {
  const { teamId, key } = await makeTeam(t.database.db);
  return { teamId, key, templateId: await insertTemplate(t.database.db, teamId), accountId: await insertMailAccount(t.database.db, teamId) };
}

type Inject = { statusCode: number; json(): any; body: string };

export function client(t: TestApp, key: string) {
  const headers = { 'x-api-key': key };
  return {
    post: (url: string, payload?: unknown): Promise<Inject> =>
      t.app.inject({ method: 'POST', url: `${BASE}${url}`, headers, ...(payload === undefined ? {} : { payload: payload as object }) }),
    get: (url: string): Promise<Inject> => t.app.inject({ method: 'GET', url: `${BASE}${url}`, headers }),
  };
}

export function validBody(f: Fixture, extra: Record<string, unknown> = {}) {
  return { name: 'Welcome', template_ids: [f.templateId], mail_account_ids: [f.accountId], events: ['contact.saved'], ...extra };
}

export async function countRows(db: Db, teamId: string): Promise<{ campaigns: number; sends: number }> {
  const { rows } = await sql<{ campaigns: number; sends: number }>`
    SELECT (SELECT count(*) FROM campaigns WHERE team_id = ${teamId}) AS campaigns,
           (SELECT count(*) FROM campaign_sends WHERE team_id = ${teamId}) AS sends`.execute(db);
  return { campaigns: Number(rows[0].campaigns), sends: Number(rows[0].sends) };
}
