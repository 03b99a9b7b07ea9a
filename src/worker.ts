// Worker entry point (background jobs only). `npm start` runs the worker inside
// the API process; in production run `npm run worker` as its own process(es).
import { main } from './main.ts';

await main({ api: false, worker: true });
