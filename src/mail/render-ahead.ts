// How far a send job renders ahead of its SMTP connections.
//
// A send job's messages were all rendered at once and then waited, rendered, for
// one of their account's five SMTP connections: a job of 50 held 45 messages in
// memory. Each message is capped (8 Mi characters of HTML, 4 Mi of Liquid output),
// but their sum was not: one team's legal template of 3 MiB per message grew the
// worker by 300 MiB per job of 50 and 620 MiB with two jobs at once (measured,
// RSS), and WORKER_CONCURRENCY (10) such jobs would have ended the worker that
// sends every team's mail.
//
// Now a message is admitted to rendering only while its job has fewer than
// `perJob` messages rendering or rendered and not yet finished, and, process
// wide, while all jobs' finished renders hold fewer than `processChars`
// characters; a job that holds nothing is always admitted one message, so no
// job waits for another forever. What the worker holds of rendered mail is then
// at most `processChars` plus one message per job in flight (each under its caps).
// Typical mail never meets the character bound; the window of `perJob` keeps
// the account's connections fed (a render takes milliseconds, an SMTP
// transaction longer).

/** A message admitted to rendering; `hold` counts its rendered size, `done` ends it. */
export type Ticket = { hold(chars: number): void; done(): void };

let processHeld = 0;
const live = new Set<RenderAhead>();

/** Characters of rendered mail held by all send jobs of this process (tests, metrics). */
export function renderedCharsHeld(): number {
  return processHeld;
}

export class RenderAhead {
  private admitted = 0;
  private readonly queue: (() => void)[] = [];
  private readonly perJob: number;
  private readonly processChars: number;

  constructor(opts: { perJob: number; processChars: number }) {
    this.perJob = opts.perJob;
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
    return this.admitted < this.perJob && (this.admitted === 0 || processHeld < this.processChars);
  }

  private pump(): void {
    while (this.queue.length > 0 && this.canAdmit()) {
      this.admitted++;
      this.queue.shift()!();
    }
  }

  private ticket(): Ticket {
    let chars = 0;
    let ended = false;
    return {
      hold: (n: number) => {
        if (ended) return;
        chars += n;
        processHeld += n;
      },
      done: () => {
        if (ended) return;
        ended = true;
        processHeld -= chars;
        this.admitted--;
        // Released characters may admit other jobs' messages too.
        for (const r of live) r.pump();
      },
    };
  }
}
