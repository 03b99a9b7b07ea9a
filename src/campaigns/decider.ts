// The campaign decider loop, one per worker process. A trigger event that a
// campaign of its team listens to (contact.saved, lead.created, sale.created
// with a contact) is written undecided and without a job (events/emit.ts,
// listenersSql); this loop finds the teams with such events (waitingTeams: a
// loose scan of the partial index events_undecided_idx) and decides them in
// batches (engine.ts, decideBatch), doing the rest of their processing (the
// webhook fan-out) in the same transaction.
//
// Why not a process_events job per event, as before: graphile-worker's
// add_jobs cost about 0.75 ms of PostgreSQL per ingested event (a plpgsql
// function whose nested statements are planned at every call), and fetching,
// locking and deleting the job as much again on the worker's side, to find
// the batch its team's decider had usually taken already. The loop's idle
// cost is one index descent per poll.
//
// Fairness: each round takes one batch of each waiting team, at most
// TEAMS_AT_ONCE teams at once, in team id order from where the last round
// stopped, so a team with a million waiting events delays another team's
// events by one batch per round, not by its backlog. Several worker processes
// run the loop side by side: a team's batches are serialised by the team's
// advisory lock (a process that finds it taken moves on).
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../db/pool.ts';
import { decideBatch, waitingTeams, type Clock, type DecideOpts } from './engine.ts';

type Logger = Pick<FastifyBaseLogger, 'warn' | 'error'>;

/** How often an idle loop looks for waiting events: the most a decision waits for its poll. */
export const DECIDE_POLL_MS = 50;
/** Teams decided at once by one process (each holds a pool connection for its batch). */
export const TEAMS_AT_ONCE = 2;
/** Teams read per round (the rest in the next, after the last of these). */
const TEAMS_PER_ROUND = 100;
/**
 * A batch gives up waiting for a row lock after this long (a session holding
 * a mail account, contact or webhook row for good): the team backs off, and
 * the round, which waits for its batches, goes on to the other teams.
 */
export const DECIDE_LOCK_TIMEOUT_MS = 10_000;
/** A team whose batch failed is retried after 1 s, doubling to this. */
const MAX_TEAM_BACKOFF_MS = 300_000;
/** The loop's own query failing (database unreachable): retried after 1 s, doubling to this. */
const MAX_LOOP_BACKOFF_MS = 30_000;

export type DeciderDeps = { db: Db; clock?: Clock; decide: DecideOpts; log: Logger; pollMs?: number; lockTimeoutMs?: number };

export class CampaignDecider {
  private readonly db: Db;
  private readonly clock: Clock;
  private readonly opts: DecideOpts;
  private readonly log: Logger;
  private readonly pollMs: number;
  private running = false;
  private loopDone: Promise<void> = Promise.resolve();
  private wake: (() => void) | null = null;
  /** Teams whose last batch failed: when to try again, and the failures in a row. */
  private readonly failing = new Map<string, { until: number; failures: number }>();

  constructor(deps: DeciderDeps) {
    this.db = deps.db;
    this.clock = deps.clock ?? (() => new Date());
    this.opts = { ...deps.decide, lockTimeoutMs: deps.lockTimeoutMs ?? DECIDE_LOCK_TIMEOUT_MS };
    this.log = deps.log;
    this.pollMs = deps.pollMs ?? DECIDE_POLL_MS;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loopDone = this.loop();
  }

  /** Stops taking batches; waits for the ones in flight to commit or roll back. */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loopDone;
  }

  private async loop(): Promise<void> {
    let after: string | null = null;
    let loopFailures = 0;
    while (this.running) {
      let worked = false;
      try {
        const teams = await waitingTeams(this.db, after, TEAMS_PER_ROUND);
        // A full page: the next round goes on after its last team; otherwise from the first.
        after = teams.length === TEAMS_PER_ROUND ? teams[teams.length - 1]! : null;
        worked = await this.round(teams);
        loopFailures = 0;
      } catch (err) {
        loopFailures++;
        this.log.warn({ err }, 'campaign decider: looking for waiting events failed; retrying');
        await this.sleep(Math.min(MAX_LOOP_BACKOFF_MS, 1_000 * 2 ** (loopFailures - 1)));
        continue;
      }
      if (!worked && after === null) await this.sleep(this.pollMs);
    }
  }

  /** One batch of each team (not backing off), TEAMS_AT_ONCE at a time; whether any batch decided events. */
  private async round(teams: string[]): Promise<boolean> {
    const now = Date.now();
    const due = teams.filter((t) => (this.failing.get(t)?.until ?? 0) <= now);
    let next = 0;
    let worked = false;
    const lane = async () => {
      while (this.running && next < due.length) {
        const team = due[next++]!;
        try {
          if ((await decideBatch(this.db, team, this.clock, NONE, this.opts)) === 'decided') worked = true;
          this.failing.delete(team);
        } catch (err) {
          const failures = (this.failing.get(team)?.failures ?? 0) + 1;
          const waitMs = Math.min(MAX_TEAM_BACKOFF_MS, 1_000 * 2 ** (failures - 1));
          this.failing.set(team, { until: Date.now() + waitMs, failures });
          this.log.error({ err, team_id: team, failures }, `campaign decider: deciding a batch failed; the team's events are retried in ${waitMs} ms`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(TEAMS_AT_ONCE, due.length) }, lane));
    // A team not tried again long after its retry fell due has nothing waiting any more (a
    // team that recovers is forgotten at its first good batch): the map stays as small as
    // the set of failing teams.
    for (const [team, f] of this.failing) if (now - f.until > MAX_TEAM_BACKOFF_MS) this.failing.delete(team);
    return worked;
  }

  private sleep(ms: number): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = null;
        done();
      };
    });
  }
}

const NONE: ReadonlySet<string> = new Set();

/**
 * Decides every waiting trigger event now, on the caller's connection pool
 * (tests, and `drain()` in their fixtures): what the loop would do, until
 * nothing is waiting. Throws if events stay held by other transactions.
 */
export async function decideAllWaiting(db: Db, decide: DecideOpts, clock: Clock = () => new Date()): Promise<void> {
  let progressAt = Date.now();
  for (;;) {
    const teams = await waitingTeams(db, null, 10_000);
    if (teams.length === 0) return;
    let worked = false;
    for (const team of teams) {
      while ((await decideBatch(db, team, clock, NONE, decide)) === 'decided') worked = true;
    }
    if (worked) progressAt = Date.now();
    else {
      if (Date.now() - progressAt > 10_000) throw new Error('decideAllWaiting: waiting events stayed held by other transactions for 10 s');
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}
