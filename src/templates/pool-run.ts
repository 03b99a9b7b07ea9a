// Running a template task in the untrusted pool: what a budget overrun means
// for the caller (the template's fault, a RenderFailure) and what it does not
// (a full pool, retried). Shared by template create's check and message render.
import { UntrustedWorkError, type UntrustedPool } from '../untrusted/pool.ts';
import type { TemplateField } from './render-tasks.ts';

/**
 * The template could not be rendered for this message: over a cap, over its
 * time or memory budget, or a Liquid error. The message fails with `message`;
 * it is the template's fault, so retrying would fail again. (A full pool is
 * not this: UntrustedWorkError 'overloaded' passes through, to be retried.)
 */
export class RenderFailure extends Error {
  readonly field: TemplateField;
  readonly reason: 'limit' | 'timeout' | 'memory' | 'crashed' | 'liquid';
  /** Over a cap on characters written (output or final HTML), not time or loops. */
  readonly size: boolean;
  constructor(field: TemplateField, reason: RenderFailure['reason'], message: string, size = false) {
    super(message);
    this.name = 'RenderFailure';
    this.field = field;
    this.reason = reason;
    this.size = size;
  }
}

/**
 * The pool's budget for a task starts when a thread begins it and is only a
 * backstop: the render budget proper is enforced in the thread (Liquid's
 * render deadline, in the thread's CPU time). The allowance covers what the
 * thread's CPU clock does not see: waiting for a core at the threads' low
 * priority.
 */
export const POOL_QUEUE_ALLOWANCE_MS = 5_000;

/** Runs a pool task for a template on behalf of `team` (the pool's fair share); budget overruns become RenderFailure, a full pool stays UntrustedWorkError. */
export async function runTemplateTask<T>(pool: UntrustedPool, task: string, input: unknown, budgetMs: number, team?: string): Promise<T> {
  try {
    return await pool.run<T>(task, input, budgetMs + POOL_QUEUE_ALLOWANCE_MS, team);
  } catch (err) {
    if (err instanceof UntrustedWorkError && err.reason !== 'overloaded') {
      // The backstop's timeout reads like the in-thread deadline's: which of the
      // two fires first depends on the machine's load, not on the template.
      const what = { timeout: 'took longer than its render budget', memory: 'used more memory than allowed', crashed: 'stopped the renderer' }[err.reason];
      throw new RenderFailure('content', err.reason, `template ${what}`);
    }
    throw err;
  }
}
