// Every background task, by graphile-worker task name. Features add theirs here.
import type { TaskList } from 'graphile-worker';
import { sql } from 'kysely';
import type { Config } from './config.ts';
import type { Db } from './db/pool.ts';
import { campaignTriggerHandler, type Clock } from './campaigns/engine.ts';
import { processEventsTask, type EventHandler } from './events/process.ts';
import { pausedBacklogTask } from './webhooks/backlog.ts';
import { retentionTask } from './ops/retention.ts';
import { autoDisableTask } from './webhooks/auto-disable.ts';
import { enqueueDeliveries } from './webhooks/deliveries.ts';
import { sendEmailTask } from './mail/send.ts';
import { contactImportTask } from './contacts/imports.ts';

/** `now`: the campaign engine's clock (cooldown, daily caps); injectable for tests. */
export type TaskDeps = { db: Db; config: Config; now?: Clock };

export function buildTaskList(deps: TaskDeps): TaskList {
  // Handlers of emitted events, in order. Webhook fan-out and campaign triggers go here.
  const eventHandlers: EventHandler[] = [
    campaignTriggerHandler(deps.db, deps.now, {
      // Events decided with another job's batch get every other handler below
      // in that transaction, and are marked processed: keep this in step with the list.
      processTaken: async (trx, ids) => {
        await enqueueDeliveries(trx, ids.map((id) => ({ id })));
        await sql`UPDATE events SET processed_at = now() WHERE id = ANY (${ids}::uuid[]) AND processed_at IS NULL`.execute(trx);
      },
    }),
    async (events) => void (await enqueueDeliveries(deps.db, events)),
  ];
  return {
    process_events: processEventsTask(deps.db, eventHandlers),
    send_email: sendEmailTask(deps),
    webhook_paused_backlog: pausedBacklogTask(deps.db, deps.config),
    retention: retentionTask(deps.db, deps.config),
    webhook_auto_disable: autoDisableTask(deps.db, deps.config),
    contact_import: contactImportTask({ db: deps.db, maxTags: deps.config.contactMaxTags }),
  };
}
