// Every background task, by graphile-worker task name. Features add theirs here.
import type { TaskList } from 'graphile-worker';
import type { Config } from './config.ts';
import type { Db } from './db/pool.ts';
import { campaignTriggerHandler, type Clock } from './campaigns/engine.ts';
import { processEventsTask, type EventHandler } from './events/process.ts';
import { enqueueDeliveries } from './webhooks/deliveries.ts';
import { sendEmailTask } from './mail/send.ts';

/** `now`: the campaign engine's clock (cooldown, daily caps); injectable for tests. */
export type TaskDeps = { db: Db; config: Config; now?: Clock };

export function buildTaskList(deps: TaskDeps): TaskList {
  // Handlers of emitted events, in order. Webhook fan-out and campaign triggers go here.
  const eventHandlers: EventHandler[] = [
    campaignTriggerHandler(deps.db, deps.now),
    async (events) => void (await enqueueDeliveries(deps.db, events)),
  ];
  return {
    process_events: processEventsTask(deps.db, eventHandlers),
    send_email: sendEmailTask(deps),
  };
}
