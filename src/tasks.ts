// Every background task, by graphile-worker task name. Features add theirs here.
import type { TaskList } from 'graphile-worker';

export function buildTaskList(): TaskList {
  return {};
}
