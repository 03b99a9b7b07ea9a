// The one registry of background tasks: graphile-worker runs this list, and
// the campaign engine's processTaken runs the same event handlers. Job names
// and payload types are declared in lib/jobs.ts; cron schedules in background.ts.
import type { Task } from 'graphile-worker';
import type { Transaction } from 'kysely';
import type { Config } from './config.ts';
import type { Db } from './db/pool.ts';
import type { Database } from './db/schema.ts';
import type { Clock, DecideOpts } from './campaigns/engine.ts';
import { processEventsTask } from './events/process.ts';
import type { JobName } from './lib/jobs.ts';
import { pausedBacklogTask } from './webhooks/backlog.ts';
import { retentionTask } from './ops/retention.ts';
import { autoDisableTask } from './webhooks/auto-disable.ts';
import { enqueueDeliveries } from './webhooks/deliveries.ts';
import { sendEmailTask } from './mail/send.ts';
import { contactImportTask } from './contacts/imports.ts';
import { imapPollTask } from './inbound/imap/poll.ts';
import { buildBroadcastBatch, finishBroadcast, LIST_BATCH } from './campaigns/broadcast.ts';
import type { MailDnsResolver } from './verification/check.ts';
import { foldStats } from './stats/fold.ts';
import { foldWebhookStats } from './webhooks/stats.ts';
import { runIteration } from './campaigns/automation.ts';
import { accountHealthTask } from './stats/health.ts';

/** `now`: the campaign engine's clock (cooldown, daily caps); injectable for tests. */
/** `mailDns`: the resolver of address verification (default: VERIFY_DNS_SERVERS or the system's; tests pass a stub's). */
export type TaskDeps = { db: Db; config: Config; now?: Clock; mailDns?: MailDnsResolver };

/**
 * What every event goes through besides the campaign decision, in order; given
 * the executor so the same list runs on the pool (process_events) or inside the
 * decider loop's transaction (the trigger events it decides, which have no job).
 */
const afterDecision: ((db: Db | Transaction<Database>, events: { id: string }[]) => Promise<unknown>)[] = [
  (db, events) => enqueueDeliveries(db, events),
];

/**
 * What the campaign decider loop does besides deciding (engine.ts,
 * decideBatch): the rest of the processing of the events it decides, in its
 * transaction, as process_events does for the others.
 */
export function decideOptions(deps: TaskDeps): DecideOpts {
  return {
    appSecret: deps.config.appSecret,
    processTaken: async (trx, ids) => {
      const events = ids.map((id) => ({ id }));
      for (const handle of afterDecision) await handle(trx, events);
    },
  };
}

/** Every job of lib/jobs.ts has its handler here, typed by its payload (a missing one fails to compile). */
export function buildTaskList(deps: TaskDeps): { [N in JobName]: Task<N> } {
  const eventHandlers = afterDecision.map((handle) => async (events: { id: string }[]) => void (await handle(deps.db, events)));
  return {
    process_events: processEventsTask(deps.db, eventHandlers),
    send_email: sendEmailTask(deps),
    webhook_paused_backlog: pausedBacklogTask(deps.db, deps.config),
    retention: retentionTask(deps.db, deps.config),
    webhook_auto_disable: autoDisableTask(deps.db, deps.config),
    contact_import: contactImportTask({ db: deps.db, maxTags: deps.config.contactMaxTags }),
    imap_poll: imapPollTask({ db: deps.db, config: deps.config }),
    broadcast_build: async (payload) => buildBroadcastBatch(deps.db, payload.campaign_send_id, deps.config.appSecret, LIST_BATCH, deps.mailDns),
    broadcast_finish: async (payload) => finishBroadcast(deps.db, payload.campaign_send_id),
    automation_iteration: async (payload) => runIteration(deps.db, payload.campaign_send_id, deps.config.appSecret, LIST_BATCH, deps.mailDns),
    stats_fold: async () => {
      await foldStats(deps.db);
      await foldWebhookStats(deps.db);
    },
    account_health: accountHealthTask(deps.db),
  };
}
