// The attackers' own process (started by bench/isolation.ts with fork): it runs
// lib/attack.ts in a worker thread and relays its messages over IPC. In a
// thread of the bench process, the attackers' heap (10 MB bodies, hundreds of
// sockets; the bench process reached 518 MiB RSS) and their garbage collection
// shared the process whose main thread times the victim: the bench's own loop
// stalled 541-810 ms in three hostile phases, and the victim's pings reached
// the service in bursts (26-61 a second in some seconds of the 200 sent on
// schedule, while the service's loop turned every few hundred ms). In their
// own process they cost the measuring thread no more than any other process
// on the machine does; on a machine this loaded that remains a lot (507 ms).
//
// `nice` (from --attacker-nice) lowers this process's priority before its
// thread starts (Linux: a thread inherits its creator's nice value): on the
// bench's machine the attackers' own CPU (building and sending the bodies)
// competes with the service for the same cores, which an attacker on another
// machine does not.
import { setPriority } from 'node:os';
import { Worker } from 'node:worker_threads';

process.once('message', (data: { nice?: number }) => {
  if (data.nice) setPriority(data.nice);
  const worker = new Worker(new URL('./attack.ts', import.meta.url), { workerData: data });
  worker.on('message', (m: unknown) => process.send!(m));
  worker.on('error', (err) => {
    process.stderr.write(`attack process: ${String(err)}\n`);
    process.exit(1);
  });
  process.on('message', (m: unknown) => worker.postMessage(m));
  worker.on('exit', () => process.exit(0));
});
process.on('disconnect', () => process.exit(0));
