// How much large rendered mail the send jobs of a worker hold.
//
// A send job renders all its messages (up to 50) at once; they then wait,
// rendered, for one of their account's five SMTP connections. Each message is
// capped (8 Mi characters of HTML, 4 Mi of Liquid output), their sum was not:
// behind a slow (or hostile) SMTP server a job held most of its messages, and
// ten jobs ten times that, in the worker that sends every team's mail.
//
// Ordinary mail keeps that path: a first render cuts the output and the HTML
// at SMALL_MESSAGE_CHARS (mail/send.ts), which bounds what a job holds to 50
// such messages. A message over the cut is rendered again, with the full caps,
// only once it is admitted here: at most `renderingPerJob` of a job's large
// messages in the render pool at a time (a render's size is known only when it
// is done, and the pool finishes what it is given), and a job that already
// holds large mail starts no further large render while the process's jobs
// hold `processChars` characters of it. A job that holds none is always
// admitted one, so no job waits for another forever. The worker then holds at
// most `processChars` characters of large mail plus one large message per job.
// (A window on every message was tried and backed out: per-job caps made the
// jobs sharing an account interleave; docs/decisions.md.)

/** A message admitted to rendering: `hold` when rendered (its size), `done` when sent or dropped. */
export type Ticket = { hold(chars: number): void; done(): void };

let processHeld = 0;
const live = new Set<RenderAhead>();

/** Characters of large rendered mail held by all send jobs of this process (tests). */
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
