// A deadlock (40P01) or serialization failure (40001) with a concurrent writer
// of the same rows is retried whole: the callers' transactions are idempotent
// until they commit, and PostgreSQL has already rolled the loser back.
const RETRYABLE = new Set(['40P01', '40001']);

/** Runs `run` (one transaction) up to `attempts` times while it fails with a retryable conflict. */
export async function retryOnConflict<T>(run: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      if (attempt >= attempts || !RETRYABLE.has((err as { code?: string }).code ?? '')) throw err;
    }
  }
}
