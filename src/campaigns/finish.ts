// When a broadcast or automation send is complete: its list is built and no message is left
// to attempt. Checked after the writes that can end its last message have
// committed (see completeFinishedSends), never by polling.
import { sql, type Transaction } from 'kysely';
import { PREPARED, type Db } from '../db/pool.ts';
import { idsRecordset } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';

type Tx = Transaction<Database>;

const FINISHED = sql`s.status = 'sending' AND s.list_built AND s.campaign_type IN ('broadcast', 'automation')
       AND NOT EXISTS (SELECT 1 FROM email_send_log l
                        WHERE l.campaign_send_id = s.id AND l.status IN ('queued', 'deferred', 'sending'))`;

/**
 * Completes the fully listed, `sending` broadcast sends among `sendIds` that
 * have no message left to attempt (none `queued`, `deferred` or `sending`):
 * one statement, an index probe per send (email_send_log_campaign_send_idx).
 * Called after every write that ends messages has committed (results
 * recorded, messages failed or cancelled before SMTP, a stale claim reaped,
 * the list completed, a resume), so the last of concurrent writers sees the
 * others' commits and completes the send; a send is never polled.
 */
export async function completeFinishedSends(db: Db | Tx, sendIds: string[]): Promise<void> {
  if (sendIds.length === 0) return;
  await sql`
    UPDATE campaign_sends s SET status = 'completed', updated_at = now()
     WHERE s.id = ANY (${[...new Set(sendIds)]}::uuid[]) AND ${FINISHED}`.execute(db);
}

/** completeFinishedSends for the sends the given messages belong to (after a send_email job), in one statement. */
export async function completeSendsOfMessages(db: Db, messageIds: string[]): Promise<void> {
  const ids = [...new Set(messageIds)];
  if (ids.length === 0) return;
  // Prepared, the messages a sized recordset (src/db/recordset.ts): it runs
  // after every send job, and unnamed it was planned at each (about 270 µs, for
  // a few µs of execution, in the latency run of `npm run bench -- campaigns`).
  await sql`${sql.raw(PREPARED)}
    UPDATE campaign_sends s SET status = 'completed', updated_at = now()
     WHERE s.id IN (SELECT l.campaign_send_id FROM email_send_log l
                     WHERE l.id IN (SELECT x.id FROM ${idsRecordset(ids)} AS x)
                       AND l.campaign_send_id IS NOT NULL)
       AND ${FINISHED}`.execute(db);
}

