// The whole service as `npm start` runs it (src/main.ts: API and worker in one
// process, migrations, graceful shutdown), for bench/isolation.ts, plus one
// thing the bench needs and the service must not expose: the event-loop delay
// of this process (perf_hooks.monitorEventLoopDelay), answered over the IPC
// channel, never over HTTP. Configured by the parent through the environment
// (PORT, DATABASE_URL, APP_SECRET, ...), exactly as an operator would.
//
// IPC: {type: 'eld'} → {type: 'eld', p50, p99, max, mean, count} in ms past the
// timer's 10 ms resolution (lib/loop-delay.ts), since the last {type: 'eld-reset'}.
import { loopDelayMeter } from '../lib/loop-delay.ts';

if (!process.send) throw new Error('bench/servers/service.ts is started by bench/isolation.ts (no IPC channel)');

// 10 ms: the timer's own granularity; a stall of 200 ms shows as 200 ms.
const delay = loopDelayMeter(10);
process.on('message', (m: { type?: string }) => {
  if (m?.type === 'eld-reset') {
    delay.reset();
    process.send!({ type: 'eld-reset' });
  } else if (m?.type === 'eld') {
    process.send!({ type: 'eld', ...delay.read() });
  }
});
// The bench went away (Ctrl-C, crash): shut down as on SIGTERM.
process.on('disconnect', () => process.kill(process.pid, 'SIGTERM'));

const { main } = await import('../../src/main.ts');
await main({ api: true, worker: true });
