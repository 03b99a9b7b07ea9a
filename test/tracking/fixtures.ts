// Sends for the tracking tests, written as rows: the sending engine is not what
// these tests are about. Each send gets the signed URLs the engine would put
// into the message.
import { sql } from 'kysely';
import type { Db } from '../../src/db/pool.ts';
import { TrackingLinks } from '../../src/lib/tracking-links.ts';
import { makeTeam, testConfig, type TestApp } from '../helpers.ts';

// A real browser's user agent: no bot signal of its own.
export const BROWSER_UA =
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36';

export function testLinks(): TrackingLinks {
  const config = testConfig();
  return new TrackingLinks(config.publicUrl, config.appSecret!);
}

export type Send = { id: string; teamId: string; contactId: string | null; email: string };

export async function insertContact(db: Db, teamId: string, email: string, countryCode: string | null = null): Promise<string> {
  const row = await db
    .insertInto('contacts')
    .values({ team_id: teamId, email, country_code: countryCode })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

/**
 * A sent message. `sentSecondsAgo` defaults to an hour, well outside every
 * timing window of the bot detection; null leaves sent_at unset.
 */
export async function insertSend(
  db: Db,
  teamId: string,
  opts: { email?: string; contactId?: string | null; sentSecondsAgo?: number | null; openTracking?: boolean; clickTracking?: boolean } = {},
): Promise<Send> {
  const email = opts.email ?? `r${Math.random().toString(36).slice(2, 10)}@example.com`;
  const contactId = opts.contactId === undefined ? await insertContact(db, teamId, email) : opts.contactId;
  const ago = opts.sentSecondsAgo === undefined ? 3600 : opts.sentSecondsAgo;
  const { rows } = await sql<{ id: string }>`
    INSERT INTO email_send_log (team_id, contact_id, email, status, open_tracking, click_tracking, sent_at, message_id)
    VALUES (${teamId}, ${contactId}, ${email}, 'sent', ${opts.openTracking ?? true}, ${opts.clickTracking ?? true},
            CASE WHEN ${ago}::float8 IS NULL THEN NULL ELSE now() - make_interval(secs => ${ago}::float8) END,
            ${`<${Math.random().toString(36).slice(2)}@plover.test>`})
    RETURNING id`.execute(db);
  return { id: rows[0]!.id, teamId, contactId, email };
}

/** A team with one sent message to a fresh contact. */
export async function makeSend(t: TestApp, opts: Parameters<typeof insertSend>[2] = {}) {
  const team = await makeTeam(t.database.db);
  const send = await insertSend(t.database.db, team.teamId, opts);
  return { ...team, send };
}

/** Path and query of a full tracking URL, for app.inject. */
export const pathOf = (url: string): string => {
  const u = new URL(url);
  return u.pathname + u.search;
};

export async function eventsOf(db: Db, teamId: string, name?: string) {
  let q = db.selectFrom('events').selectAll().where('team_id', '=', teamId);
  if (name) q = q.where('name', '=', name);
  return q.orderBy('created_at').orderBy('id').execute();
}

export async function hitsOf(db: Db, sendId: string) {
  return db.selectFrom('tracking_hits').selectAll().where('email_send_log_id', '=', sendId).orderBy('created_at').orderBy('id').execute();
}

export async function countersOf(db: Db, send: Send) {
  const log = await db
    .selectFrom('email_send_log')
    .select(['opens_count', 'clicks_count', 'first_opened_at', 'first_clicked_at', 'open_hits_count', 'click_hits_count'])
    .where('id', '=', send.id)
    .executeTakeFirstOrThrow();
  const contact = send.contactId
    ? await db
        .selectFrom('contacts')
        .select(['opens_count', 'clicks_count', 'first_opened_at', 'last_opened_at', 'first_clicked_at', 'last_clicked_at'])
        .where('id', '=', send.contactId)
        .executeTakeFirstOrThrow()
    : null;
  return { log, contact };
}
