// How much rendered mail the send jobs of a worker hold.
//
// A send job's messages were all rendered at once and then waited, rendered, for
// one of their account's five SMTP connections: behind a slow (or hostile) SMTP
// server a job of 50 held 45 of them. Each message is capped (8 Mi characters of
// HTML, 4 Mi of Liquid output), their sum was not: ten jobs of one team at once
// could hold 450 messages near the cap, gigabytes, in the worker that sends every
// team's mail.
//
// Now a job hands at most `renderingPerJob` messages to the render pool at a time
// (a render's size is known only when it is done, and the pool finishes what it
// was given), and a job that already holds rendered mail starts another render
// only while the process's jobs hold fewer than `processChars` characters of it.
// A job that holds nothing is always admitted one message, so no job waits for
// another forever. The worker then holds at most `processChars` characters plus
// `renderingPerJob` messages per job in flight. Ordinary mail never meets the
// character bound: a job renders its messages as fast as the pool allows (as before)
// and they wait for a connection rendered.

/** A message admitted to rendering: `hold` when rendered (its size), `done` when sent or dropped. */
export type Ticket = { hold(chars: number): void; done(): void };

let processHeld = 0;
const live = new Set<RenderAhead>();

/** Characters of rendered mail held by all send jobs of this process (tests). */
export function renderedCharsHeld(): number {
  return processHeld;
}

export class RenderAhead {
  private rendering = 0;
  private held = 0;
  private readonly queue: (() => void)[] = [];
  private readonly renderingPerJob: number;
  private readonly processChars: number;

  constructor(opts: { renderingPerJob: number; processChars: number }) {
    this.renderingPerJob = opts.renderingPerJob;
    this.processChars = opts.processChars;
    live.add(this);
  }

  /** Waits until this job may render one more message. */
  enter(): Promise<Ticket> {
    return new Promise((resolve) => {
      this.queue.push(() => resolve(this.ticket()));
      this.pump();
    });
  }

  /** The job is over: it no longer waits for others' releases. */
  close(): void {
    live.delete(this);
  }

  private canAdmit(): boolean {
    if (this.rendering >= this.renderingPerJob) return false;
    return (this.rendering === 0 && this.held === 0) || processHeld < this.processChars;
  }

  private pump(): void {
    while (this.queue.length > 0 && this.canAdmit()) {
      this.rendering++;
      this.queue.shift()!();
    }
  }

  private ticket(): Ticket {
    let chars = 0;
    let state: 'rendering' | 'held' | 'done' = 'rendering';
    return {
      hold: (n: number) => {
        if (state !== 'rendering') return;
        state = 'held';
        chars = n;
        processHeld += n;
        this.rendering--;
        this.held++;
        this.pump();
      },
      done: () => {
        if (state === 'done') return;
        if (state === 'rendering') this.rendering--;
        else {
          this.held--;
          processHeld -= chars;
        }
        state = 'done';
        // Released characters may admit other jobs' messages too.
        for (const r of live) r.pump();
      },
    };
  }
}
