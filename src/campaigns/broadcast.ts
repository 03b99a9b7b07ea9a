// Broadcast campaigns: one send to every active contact of the team that
// matches the segment, at `scheduled_send_time` (null: at once), capped by
// `send_amount` (0: all).
//
// Scheduling: creating (or rescheduling) a broadcast adds one `broadcast_build`
// job at the start time (graphile-worker `run_at`, job key per send, so a
// reschedule moves that job rather than adding a second).
//
// The recipient list is written in batches of LIST_BATCH contacts, keyset by
// contact id. Each batch is one transaction: lock the send row, read its
// cursor, write a decision per contact (send, or skip with the reason) and a
// `queued` message per send, enqueue the send jobs, move the cursor, and
// enqueue the next batch. A batch that runs twice (a crash after the commit
// but before graphile-worker marked the job done, a duplicate job) finds the
// moved cursor, and the unique (campaign_send_id, contact_id) of list entries
// turns any overlap into nothing (ON CONFLICT DO NOTHING): nobody is listed
// twice and nobody is skipped. Memory holds one batch, never the list.
//
// Completion is not polled: the send completes after the write that ends its
// last message has committed (campaigns/finish.ts says where).
//
// Sending goes through send_email (mail/send.ts) at the broadcast priority
// (after transactional and event-triggered mail), SEND_BATCH messages a job:
// the claim there re-checks suppressions and the contact's status, and holds a
// message of a paused send back (`queued`) until start re-enqueues it.
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { JOB_PRIORITY } from '../lib/jobs.ts';
import { segmentSql } from './segment.ts';
import { chooseRecipients, enqueueSends, prefetchForBatch, verifier, writeListEntries } from './list-writer.ts';
import { defaultMailDns, type MailDnsResolver } from '../verification/check.ts';
import { completeFinishedSends } from './finish.ts';
import { scheduleIteration } from './automation.ts';
import type { SendDataValue } from './schemas.ts';

type Tx = Transaction<Database>;

export { LIST_BATCH } from './list-writer.ts';
import { LIST_BATCH } from './list-writer.ts';


/**
 * Adds (or moves) the job that starts building the list of a send at `runAt`
 * (null: now). The job key is per send: a reschedule replaces the pending job.
 */
export async function scheduleBroadcast(db: Db | Tx, sendId: string, runAt: Date | null): Promise<void> {
  await sql`
    SELECT graphile_worker.add_job('broadcast_build', json_build_object('campaign_send_id', ${sendId}::text),
             run_at := coalesce(${runAt}::timestamptz, now()), max_attempts := 25, priority := ${JOB_PRIORITY.broadcast}::int,
             job_key := ${`broadcast-build:${sendId}`}, job_key_mode := 'replace')`.execute(db);
}

type SendRow = {
  id: string; team_id: string; campaign_id: string; status: string; send_data: SendDataValue;
  list_cursor: string | null; list_built: boolean; total_recipients: number; next_send_at: Date | null;
};
type ContactRow = Record<string, unknown> & { id: string; team_id: string; email: string; status: string };

/** One batch of the recipient list of a send; enqueues the next batch, or, the list complete, completes the send if nothing is left to attempt (campaigns/finish.ts). */
export async function buildBroadcastBatch(
  db: Db, sendId: string, appSecret: string | undefined, batch = LIST_BATCH, dns: MailDnsResolver = defaultMailDns(),
): Promise<void> {
  // Address verification looks up the next batch's domains before the transaction: no DNS wait holds the send's lock.
  await prefetchForBatch(db, dns, sql`SELECT team_id, send_data, list_cursor FROM campaign_sends WHERE id = ${sendId}`, (send, inSegment) => sql<{ email: string }>`
      SELECT email FROM contacts
       WHERE team_id = ${send.team_id} AND (${send.list_cursor}::uuid IS NULL OR id > ${send.list_cursor}::uuid) AND ${inSegment}
       ORDER BY id LIMIT ${batch}`);
  const listed = await db.transaction().execute(async (trx): Promise<boolean> => {
    const { rows } = await sql<SendRow>`
      SELECT s.id, s.team_id, s.campaign_id, s.status, s.send_data, s.list_cursor, s.list_built, s.total_recipients, s.next_send_at
        FROM campaign_sends s JOIN campaigns c ON c.id = s.campaign_id AND c.team_id = s.team_id AND c.deleted_at IS NULL
       WHERE s.id = ${sendId} FOR UPDATE OF s`.execute(trx);
    const send = rows[0];
    if (!send) return false;
    if (send.status === 'scheduled') {
      // Moved later since this job was added (a PATCH replaces the job, but a run may have started first).
      if (send.next_send_at && send.next_send_at.getTime() > Date.now() + 1000) return false;
      await sql`UPDATE campaign_sends SET status = 'sending', updated_at = now() WHERE id = ${sendId}`.execute(trx);
    } else if (send.status !== 'sending') {
      return false; // paused (start enqueues this job again), cancelled, completed
    }
    if (send.list_built) return false;

    const sd = send.send_data;
    const cap = sd.broadcast_send?.send_amount ?? 0;
    const room = cap > 0 ? cap - send.total_recipients : Infinity;
    const rules = sd.segment_query?.rules ?? [];
    // The segment runs in the query when it compiles (segment.ts); the rows are tested again below either way.
    const inSegment = segmentSql(rules) ?? sql<boolean>`true`;
    const { rows: contacts } = room <= 0 ? { rows: [] as ContactRow[] } : await sql<ContactRow>`
      SELECT * FROM contacts
       WHERE team_id = ${send.team_id} AND (${send.list_cursor}::uuid IS NULL OR id > ${send.list_cursor}::uuid)
         AND ${inSegment}
       ORDER BY id LIMIT ${batch}`.execute(trx);
    const chosen = await chooseRecipients(trx, contacts, rules, room, appSecret, verifier(trx, send));
    const capped = chosen.capped || (cap > 0 && chosen.sends >= room);
    const cursor = chosen.cursor ?? send.list_cursor;
    await writeListEntries(trx, send, chosen.entries);
    const done = capped || contacts.length < batch;
    await sql`
      UPDATE campaign_sends SET list_cursor = ${cursor}::uuid, list_built = ${done}, updated_at = now() WHERE id = ${sendId}`.execute(trx);
    if (!done) await scheduleBroadcast(trx, sendId, null);
    return done;
  });
  // The list is complete: when every message already has its result (or the
  // last batch listed nobody), nothing else will complete the send.
  if (listed) await completeFinishedSends(db, [sendId]);
}

/**
 * The broadcast_finish job of earlier versions (a check every 5 s): jobs
 * queued before an upgrade run the check once; nothing enqueues it any more.
 */
export async function finishBroadcast(db: Db, sendId: string): Promise<void> {
  await completeFinishedSends(db, [sendId]);
}

/**
 * Resumes a broadcast send (start after stop): the list goes on being built,
 * and every message still `queued` gets a send job again (keyset by id, in
 * one statement per LIST_BATCH). Called in the transaction that set `sending`.
 */
export async function resumeBroadcast(trx: Db | Tx, sendId: string, kind: 'broadcast' | 'automation' = 'broadcast'): Promise<void> {
  if (kind === 'broadcast') await scheduleBroadcast(trx, sendId, null);
  else await scheduleIteration(trx, sendId, 'due');
  let after: string | null = null;
  for (;;) {
    const { rows }: { rows: { id: string }[] } = await sql<{ id: string }>`
      SELECT id FROM email_send_log WHERE campaign_send_id = ${sendId} AND status IN ('queued', 'deferred')
         AND (${after}::uuid IS NULL OR id > ${after}::uuid)
       ORDER BY id LIMIT ${LIST_BATCH}`.execute(trx);
    if (rows.length === 0) break;
    await enqueueSends(trx, rows.map((r) => r.id));
    after = rows.at(-1)!.id;
    if (rows.length < LIST_BATCH) break;
  }
}

/**
 * Cancels the latest send of a broadcast: its messages not yet claimed for
 * SMTP become `cancelled` (reason "campaign cancelled"); a message already
 * being sent finishes. Returns the number cancelled, or null when the send
 * cannot be cancelled (its status is returned instead).
 */
export async function cancelBroadcast(db: Db, teamId: string, campaignId: string): Promise<{ cancelled: number } | { status: string | null }> {
  return db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ id: string; status: string }>`
      SELECT s.id, s.status FROM campaign_sends s
        JOIN campaigns c ON c.id = s.campaign_id AND c.team_id = s.team_id AND c.deleted_at IS NULL
       WHERE s.campaign_id = ${campaignId} AND s.team_id = ${teamId} AND c.campaign_type IN ('broadcast', 'automation')
       ORDER BY s.created_at DESC, s.id DESC LIMIT 1 FOR UPDATE OF s`.execute(trx);
    const send = rows[0];
    if (!send) return { status: null };
    if (!['scheduled', 'sending', 'paused'].includes(send.status)) return { status: send.status };
    await sql`UPDATE campaign_sends SET status = 'cancelled', updated_at = now() WHERE id = ${send.id}`.execute(trx);
    const res = await sql`
      UPDATE email_send_log SET status = 'cancelled', last_error = 'campaign cancelled', updated_at = now()
       WHERE campaign_send_id = ${send.id} AND team_id = ${teamId} AND status IN ('queued', 'deferred')`.execute(trx);
    await sql`UPDATE campaigns SET updated_at = now() WHERE id = ${campaignId} AND team_id = ${teamId}`.execute(trx);
    return { cancelled: Number(res.numAffectedRows ?? 0) };
  });
}

/**
 * Stop and start of a broadcast: stop pauses a `scheduled` or `sending` send
 * (its queued messages wait, `queued`); start resumes a paused one (`sending`:
 * the list goes on from its cursor and the queued messages are enqueued
 * again). Returns 'not_broadcast' for any other campaign kind (the caller
 * applies the event-triggered transition), the status that forbids the change,
 * or 'changed' / 'unchanged'.
 */
export async function pauseOrResume(
  db: Db, teamId: string, campaignId: string, action: 'start' | 'stop',
): Promise<{ kind: 'not_broadcast' | 'changed' | 'unchanged' } | { kind: 'conflict'; status: string }> {
  const result = await db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ id: string; status: string; campaign_type: string }>`
      SELECT s.id, s.status, c.campaign_type FROM campaign_sends s
        JOIN campaigns c ON c.id = s.campaign_id AND c.team_id = s.team_id AND c.deleted_at IS NULL
       WHERE s.campaign_id = ${campaignId} AND s.team_id = ${teamId}
       ORDER BY s.created_at DESC, s.id DESC LIMIT 1 FOR UPDATE OF s`.execute(trx);
    const send = rows[0];
    if (!send || (send.campaign_type !== 'broadcast' && send.campaign_type !== 'automation')) return { kind: 'not_broadcast' as const };
    if (action === 'stop') {
      if (send.status === 'paused') return { kind: 'unchanged' as const };
      if (send.status !== 'scheduled' && send.status !== 'sending') return { kind: 'conflict' as const, status: send.status };
      await sql`UPDATE campaign_sends SET status = 'paused', updated_at = now() WHERE id = ${send.id}`.execute(trx);
    } else {
      if (send.status === 'sending' || send.status === 'scheduled') return { kind: 'unchanged' as const };
      if (send.status !== 'paused') return { kind: 'conflict' as const, status: send.status };
      // A start after the delivery-rate guard paused the send lets the next iteration past the guard once.
      await sql`UPDATE campaign_sends SET status = 'sending', updated_at = now(),
                  guard_passed_iteration = CASE WHEN pause_reason = 'delivery_rate' THEN current_iteration + 1 ELSE guard_passed_iteration END,
                  pause_reason = NULL
                WHERE id = ${send.id}`.execute(trx);
      await resumeBroadcast(trx, send.id, send.campaign_type as 'broadcast' | 'automation');
    }
    await sql`UPDATE campaigns SET updated_at = now() WHERE id = ${campaignId} AND team_id = ${teamId}`.execute(trx);
    return { kind: 'changed' as const, sendId: send.id, resumed: action === 'start' };
  });
  // Resumed with nothing left to send (every message ended while it was paused).
  if (result.kind === 'changed' && result.resumed) await completeFinishedSends(db, [result.sendId]);
  return result.kind === 'changed' ? { kind: 'changed' } : result;
}
