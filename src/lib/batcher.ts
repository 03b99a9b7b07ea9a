// Group commit for work that many concurrent callers hand in one item at a
// time: one batch is in flight at a time, and what arrives while it runs
// waits and goes, all together, into the next one. Batches grow with the load
// instead of queueing behind each other, and a quiet caller is not held back:
// an item that arrives while nothing is in flight goes after `delayMs` (0: at
// once, in the next macrotask, so items of the same tick share a batch).
// That macrotask is setTimeout(0), which Node holds for at least 1 ms, and the
// SMTP claims (src/mail/send.ts) rely on that millisecond as their group-commit
// window: flushed by setImmediate instead, `bench campaigns` made 0.50 claim
// statements per e-mail instead of 0.30, with more CPU and no latency gained.
//
// Each caller gets its own item's result (or the batch's error). The batch
// function must return one result per item, in order.
//
// Written here rather than taken from `dataloader`: that library schedules a
// batch per tick and runs batches side by side, where these callers (the
// inbound listener's lookups and commits) need one at a time with the next
// batch growing while the previous one runs.

export type BatcherOptions = {
  /** A batch holds at most this many items; a full batch goes at once. */
  max: number;
  /** How long the first item of an idle batcher waits for company (0: until the next macrotask). */
  delayMs?: number;
};

type Waiter<I, R> = { item: I; resolve(r: R): void; reject(err: unknown): void };

export class Batcher<I, R> {
  private waiting: Waiter<I, R>[] = [];
  private timer: NodeJS.Timeout | null = null;
  private busy: Promise<void> | null = null;
  private readonly run: (items: I[]) => Promise<R[]>;
  private readonly max: number;
  private readonly delayMs: number;

  constructor(run: (items: I[]) => Promise<R[]>, opts: BatcherOptions) {
    if (!(opts.max >= 1)) throw new Error('Batcher: max must be at least 1');
    this.run = run;
    this.max = opts.max;
    this.delayMs = opts.delayMs ?? 0;
  }

  add(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      if (this.busy) return;
      if (this.waiting.length >= this.max) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.delayMs);
    });
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.busy || this.waiting.length === 0) return;
    const batch = this.waiting.splice(0, this.max);
    this.busy = (async () => {
      try {
        const results = await this.run(batch.map((w) => w.item));
        if (results.length !== batch.length) throw new Error(`Batcher: ${results.length} results for ${batch.length} items`);
        batch.forEach((w, i) => w.resolve(results[i]!));
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    })().finally(() => {
      this.busy = null;
      this.flush();
    });
  }

  /** Sends what waits and resolves when nothing is in flight. */
  async close(): Promise<void> {
    this.flush();
    while (this.busy) await this.busy;
  }
}
