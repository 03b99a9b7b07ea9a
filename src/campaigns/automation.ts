// Automation sends (warm-up style): the segment's active contacts in batches
// ("iterations"), iteration 1 at `scheduled_send_time` (null: at once),
// iteration k+1 `send_interval` seconds after iteration k. Iteration k lists
// the next `iteration_send_amount` contacts (× k when incremental, capped by
// `max_iteration_send_amount`) not yet listed by this send, the segment
// evaluated afresh each time, so contacts that match later join later
// iterations. The send ends after `max_iterations` iterations, after
// `send_amount` recipients in total, or when no recipient is left; it is
// `completed` once those messages have all been attempted (finish.ts).
//
// Scheduling: one `automation_iteration` job per send (job key per send,
// graphile-worker `run_at`), never a polling loop of ours. A job writes at
// most LIST_BATCH candidates per transaction and re-enqueues itself at once
// until the iteration is listed; `iteration_listed` on the send row carries
// the count across jobs, so a crash mid-iteration goes on where the last
// committed batch stopped, and the list entries' unique key lists nobody twice.
//
// The delivery-rate guard (`min_delivery_rate` > 0), before each iteration
// after the first: it waits (the job runs again GUARD_RECHECK_SECONDS later)
// until every message of the send so far has been attempted, then computes
// delivery = (sent − bounced_hard − bounced_soft) ÷ sent over the send's
// messages (exact counts from the message log: sent counts every message
// handed to the relay, accepted or refused, and a bounce by report counts as a
// bounce). Below the minimum the send becomes `paused` with pause_reason
// `delivery_rate`. A start clears the reason and lets that iteration pass the
// guard once (the team has looked and chosen to go on).
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { JOB_PRIORITY } from '../lib/jobs.ts';
import { completeFinishedSends } from './finish.ts';
import { chooseRecipients, LIST_BATCH, prefetchForBatch, verifier, writeListEntries, type ContactRow } from './list-writer.ts';
import { defaultMailDns, type MailDnsResolver } from '../verification/check.ts';
import type { SendDataValue } from './schemas.ts';
import { segmentSql } from './segment.ts';

type Tx = Transaction<Database>;

/** Seconds between two looks at whether the previous iteration's messages have all been attempted. */
export const GUARD_RECHECK_SECONDS = 30;

/**
 * Adds (or moves) the send's iteration job to `runAt` (null: now; 'due': when
 * the next iteration is due, now if that is past: a start after a stop).
 */
export async function scheduleIteration(db: Db | Tx, sendId: string, runAt: Date | null | 'due'): Promise<void> {
  const at = runAt === 'due'
    ? sql`greatest(now(), (SELECT next_send_at FROM campaign_sends WHERE id = ${sendId}::uuid))`
    : sql`coalesce(${runAt}::timestamptz, now())`;
  await sql`
    SELECT graphile_worker.add_job('automation_iteration', json_build_object('campaign_send_id', ${sendId}::text),
             run_at := ${at}, max_attempts := 25, priority := ${JOB_PRIORITY.broadcast}::int,
             job_key := ${`automation-iteration:${sendId}`}, job_key_mode := 'replace')`.execute(db);
}

type SendRow = {
  id: string; team_id: string; campaign_id: string; status: string; send_data: SendDataValue; list_built: boolean;
  total_recipients: number; next_send_at: Date | null; current_iteration: number; iteration_listed: number;
  guard_passed_iteration: number | null;
};

/** The number of recipients iteration `k` (1-based) lists before the total cap. */
export function iterationSize(a: SendDataValue['automation_send'], k: number): number {
  const base = a.iteration_send_amount;
  if (!a.is_incremental_send) return base;
  const grown = base * k;
  return a.max_iteration_send_amount > 0 ? Math.min(grown, a.max_iteration_send_amount) : grown;
}

/** The send's delivery so far, exact, from its messages: sent, bounced and whether any is still open. */
export async function deliverySoFar(db: Db | Tx, sendId: string): Promise<{ sent: number; bounced: number; open: number }> {
  const { rows } = await sql<{ sent: number; bounced: number; open: number }>`
    SELECT count(*) FILTER (WHERE status IN ('sent', 'delivered', 'bounced_soft', 'bounced_hard'))::int AS sent,
           count(*) FILTER (WHERE status IN ('bounced_soft', 'bounced_hard'))::int AS bounced,
           count(*) FILTER (WHERE status IN ('queued', 'deferred', 'sending'))::int AS open
      FROM email_send_log WHERE campaign_send_id = ${sendId}`.execute(db);
  return rows[0]!;
}

/**
 * One step of an automation send: the guard (before iteration 2 and later),
 * then up to `batch` candidates of the current iteration; re-enqueues itself
 * to go on, schedules the next iteration, or ends the list.
 */
export async function runIteration(
  db: Db, sendId: string, appSecret: string | undefined, batch = LIST_BATCH, dns: MailDnsResolver = defaultMailDns(),
): Promise<void> {
  // Address verification looks up the candidates' domains before the transaction.
  await prefetchForBatch(db, dns, sql`SELECT team_id, send_data FROM campaign_sends WHERE id = ${sendId}`, (send, inSegment) => sql<{ email: string }>`
    SELECT c.email FROM contacts c
     WHERE c.team_id = ${send.team_id} AND ${inSegment}
       AND NOT EXISTS (SELECT 1 FROM campaign_decisions d WHERE d.campaign_send_id = ${sendId} AND d.contact_id = c.id AND d.list_entry)
     ORDER BY c.id LIMIT ${batch}`);
  const ended = await db.transaction().execute(async (trx): Promise<boolean> => {
    const { rows } = await sql<SendRow>`
      SELECT s.id, s.team_id, s.campaign_id, s.status, s.send_data, s.list_built, s.total_recipients, s.next_send_at,
             s.current_iteration, s.iteration_listed, s.guard_passed_iteration
        FROM campaign_sends s JOIN campaigns c ON c.id = s.campaign_id AND c.team_id = s.team_id AND c.deleted_at IS NULL
       WHERE s.id = ${sendId} AND s.campaign_type = 'automation' FOR UPDATE OF s`.execute(trx);
    const send = rows[0];
    if (!send || send.list_built) return false;
    if (send.status === 'scheduled') {
      // Moved later since this job was added (a PATCH replaces the job, but a run may have started first).
      if (send.next_send_at && send.next_send_at.getTime() > Date.now() + 1000) return false;
      await sql`UPDATE campaign_sends SET status = 'sending', updated_at = now() WHERE id = ${sendId}`.execute(trx);
    } else if (send.status !== 'sending') {
      return false; // paused (start enqueues this job again), cancelled, completed
    } else if (send.iteration_listed === 0 && send.next_send_at && send.next_send_at.getTime() > Date.now() + 1000) {
      return false; // the next iteration is not due (a stray run; its own job waits for next_send_at)
    }
    const a = send.send_data.automation_send;
    const k = send.current_iteration + 1;

    // The guard, at the start of every iteration after the first.
    if (k > 1 && send.iteration_listed === 0 && a.min_delivery_rate > 0 && send.guard_passed_iteration !== k) {
      const d = await deliverySoFar(trx, sendId);
      if (d.open > 0) {
        await scheduleIteration(trx, sendId, new Date(Date.now() + GUARD_RECHECK_SECONDS * 1000));
        return false;
      }
      // Delivery in percent, compared exactly: (sent − bounced) × 100 < min × sent. Nothing sent: no rate, no pause.
      if (d.sent > 0 && (d.sent - d.bounced) * 100 < a.min_delivery_rate * d.sent) {
        await sql`UPDATE campaign_sends SET status = 'paused', pause_reason = 'delivery_rate', updated_at = now() WHERE id = ${sendId}`.execute(trx);
        return false;
      }
    }

    const total = a.send_amount > 0 ? a.send_amount - send.total_recipients : Infinity;
    const quota = Math.min(iterationSize(a, k) - send.iteration_listed, total);
    const rules = send.send_data.segment_query?.rules ?? [];
    const inSegment = segmentSql(rules as never) ?? sql<boolean>`true`;
    // Contacts of the segment this send has not listed (sent or skipped), oldest first.
    const { rows: contacts } = quota <= 0 ? { rows: [] as ContactRow[] } : await sql<ContactRow>`
      SELECT c.* FROM contacts c
       WHERE c.team_id = ${send.team_id} AND ${inSegment}
         AND NOT EXISTS (SELECT 1 FROM campaign_decisions d
                          WHERE d.campaign_send_id = ${sendId} AND d.contact_id = c.id AND d.list_entry)
       ORDER BY c.id LIMIT ${batch}`.execute(trx);
    const chosen = await chooseRecipients(trx, contacts, rules, quota, appSecret, verifier(trx, send));
    const written = await writeListEntries(trx, send, chosen.entries);
    const listed = send.iteration_listed + written;
    // This iteration is listed when its quota is met or the candidates ran out.
    const exhausted = contacts.length < batch && !chosen.capped;
    const iterationDone = chosen.sends >= quota || exhausted;
    if (!iterationDone) {
      await sql`UPDATE campaign_sends SET iteration_listed = ${listed}, updated_at = now() WHERE id = ${sendId}`.execute(trx);
      await scheduleIteration(trx, sendId, null);
      return false;
    }
    const reachedTotal = a.send_amount > 0 && send.total_recipients + written >= a.send_amount;
    const reachedIterations = a.max_iterations > 0 && k >= a.max_iterations;
    const last = exhausted || reachedTotal || reachedIterations;
    await sql`
      UPDATE campaign_sends SET current_iteration = ${listed > 0 ? k : k - 1}, iteration_listed = 0, list_built = ${last},
             next_send_at = ${last ? null : new Date(Date.now() + a.send_interval * 1000)}::timestamptz, updated_at = now()
       WHERE id = ${sendId}`.execute(trx);
    if (!last) await scheduleIteration(trx, sendId, new Date(Date.now() + a.send_interval * 1000));
    return last;
  });
  // The last iteration is listed: if its messages are already done (or it listed nobody), nothing else completes the send.
  if (ended) await completeFinishedSends(db, [sendId]);
}
