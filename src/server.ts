// API entry point: listens. With RUN_WORKER (the default) it runs the worker too.
import { main } from './main.ts';

await main({ api: true, worker: undefined });
