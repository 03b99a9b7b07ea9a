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
// Fairness: each pass takes one batch of each waiting team, at most
// TEAMS_AT_ONCE teams at once, in team id order, so a team with a million
// waiting events delays another team's events by one batch per pass, not by
// its backlog. Several worker processes run the loop side by side: a team's
// batches are serialised by the team's advisory lock (a process that finds it
// taken moves on).
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../db/pool.ts';
import { decideBatch, waitingTeams, type Clock, type DecideOpts } from './engine.ts';

type Logger = Pick<FastifyBaseLogger, 'warn' | 'error'>;

/** How often an idle loop looks for waiting events: the most a decision waits for its poll. */
export const DECIDE_POLL_MS = 50;
/** Teams decided at once by one process (each holds a pool connection for its batch). */
export const TEAMS_AT_ONCE = 2;
/** Teams read per look at the index (the rest in the next, after the last of these). */
const TEAMS_PER_PAGE = 100;
/**
 * A batch's lock waits and statements give up after these (a session holding
 * a mail account, contact or webhook row for good; a connection that stopped
 * answering): the team backs off, and the other lane goes on meanwhile.
 */
export const DECIDE_LOCK_TIMEOUT_MS = 10_000;
export const DECIDE_STATEMENT_TIMEOUT_MS = 60_000;
/** A team whose batch failed is retried after 1 s, doubling to this. */
const MAX_TEAM_BACKOFF_MS = 300_000;
/** The loop's own query failing (database unreachable): retried after 1 s, doubling to this. */
const MAX_LOOP_BACKOFF_MS = 30_000;

export type DeciderDeps = {
  db: Db;
  clock?: Clock;
  /** What deciding does besides deciding (tasks.ts, decideOptions). */
  decide: DecideOpts;
  log: Logger;
  pollMs?: number;
  lockTimeoutMs?: number;
  /** Teams per look at the index (tests). */
  pageSize?: number;
};

/**
 * TEAMS_AT_ONCE lanes share one work list: a page of waiting teams in id order.
 * A lane takes the next team that no lane is deciding and that is not backing
 * off, decides one batch of it, and takes the next; the lane that finds the
 * list used up reads the next page (after the last team of this one; from the
 * first when this one was the last). A pass over all pages that decided
 * nothing ends in a sleep of pollMs before the next. A lane stuck in a batch
 * (up to the lock and statement timeouts) holds back only its team: the other
 * lane goes on through the list, passing over that team.
 */
export class CampaignDecider {
  private readonly db: Db;
  private readonly clock: Clock;
  private readonly opts: DecideOpts;
  private readonly log: Logger;
  private readonly pollMs: number;
  private readonly pageSize: number;
  private running = false;
  private lanesDone: Promise<void> = Promise.resolve();
  private wake: (() => void) | null = null;
  /** The current page's teams not yet taken, and where the next page starts (null: at the first team). */
  private list: string[] = [];
  private after: string | null = null;
  /** Whether a batch decided events since the current pass over the pages began. */
  private passWorked = true;
  private reading: Promise<void> | null = null;
  private readFailures = 0;
  private readonly deciding = new Set<string>();
  /** Teams whose last batch failed: when to try again, and the failures in a row. */
  private readonly failing = new Map<string, { until: number; failures: number }>();

  constructor(deps: DeciderDeps) {
    this.db = deps.db;
    this.clock = deps.clock ?? (() => new Date());
    this.opts = { ...deps.decide, lockTimeoutMs: deps.lockTimeoutMs ?? DECIDE_LOCK_TIMEOUT_MS, statementTimeoutMs: DECIDE_STATEMENT_TIMEOUT_MS };
    this.log = deps.log;
    this.pollMs = deps.pollMs ?? DECIDE_POLL_MS;
    this.pageSize = deps.pageSize ?? TEAMS_PER_PAGE;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.lanesDone = Promise.all(Array.from({ length: TEAMS_AT_ONCE }, () => this.lane())).then(
      () => undefined,
      (err: unknown) => this.log.error({ err }, 'campaign decider: a lane stopped on an unexpected error'),
    );
  }

  /**
   * Stops taking batches; waits for the ones in flight to commit or roll back,
   * at most a statement timeout and a bit (a batch on a connection that stopped
   * answering is abandoned: its transaction ends with the connection).
   */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), DECIDE_STATEMENT_TIMEOUT_MS + 5_000);
    });
    const outcome = await Promise.race([this.lanesDone, deadline]);
    clearTimeout(timer);
    if (outcome === 'late') this.log.error({}, 'campaign decider: a batch did not finish within the statement timeout at shutdown; abandoned');
  }

  private async lane(): Promise<void> {
    for (;;) {
      const team = await this.take();
      if (team === undefined) return; // stopped
      this.deciding.add(team);
      try {
        const outcome = await decideBatch(this.db, team, this.clock, this.opts);
        // Only a batch that went through clears a failing team: 'busy' (another
        // process's lane has the team, maybe stuck the same way) says nothing.
        if (outcome === 'decided') {
          this.passWorked = true;
          this.failing.delete(team);
          // The other lane may be sleeping out a pass that had found nothing: there is
          // work (not the backoff of a failed read: the database is answering again, but
          // the read's own retry says so).
          if (this.readFailures === 0) this.wake?.();
        }
      } catch (err) {
        const failures = (this.failing.get(team)?.failures ?? 0) + 1;
        const waitMs = Math.min(MAX_TEAM_BACKOFF_MS, 1_000 * 2 ** (failures - 1));
        this.failing.set(team, { until: Date.now() + waitMs, failures });
        this.log.error({ err, team_id: team, failures }, `campaign decider: deciding a batch failed; the team's events are retried in ${waitMs} ms`);
      } finally {
        this.deciding.delete(team);
      }
    }
  }

  /** The next team to decide a batch of; undefined once stopped. */
  private async take(): Promise<string | undefined> {
    while (this.running) {
      const now = Date.now();
      while (this.list.length > 0) {
        const team = this.list.shift()!;
        if (!this.deciding.has(team) && (this.failing.get(team)?.until ?? 0) <= now) return team;
      }
      this.reading ??= this.readPage().finally(() => (this.reading = null));
      await this.reading;
    }
    return undefined;
  }

  private async readPage(): Promise<void> {
    if (this.after === null) {
      // A new pass over the pages: after one that decided nothing, wait first.
      if (!this.passWorked) await this.sleep(this.pollMs);
      this.passWorked = false;
      this.forgetRecovered();
    }
    if (!this.running) return;
    try {
      const teams = await waitingTeams(this.db, this.after, this.pageSize);
      // A full page: the next one goes on after its last team; otherwise the next pass starts from the first.
      this.after = teams.length === this.pageSize ? teams[teams.length - 1]! : null;
      this.list = teams;
      this.readFailures = 0;
    } catch (err) {
      this.readFailures++;
      this.log.warn({ err }, 'campaign decider: looking for waiting events failed; retrying');
      await this.sleep(Math.min(MAX_LOOP_BACKOFF_MS, 1_000 * 2 ** (this.readFailures - 1)));
    }
  }

  /** A team not tried again long after its retry fell due has nothing waiting any more: forgotten. */
  private forgetRecovered(): void {
    const now = Date.now();
    for (const [team, f] of this.failing) if (now - f.until > MAX_TEAM_BACKOFF_MS) this.failing.delete(team);
  }

  private sleep(ms: number): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        if (this.wake === wake) this.wake = null;
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wake = wake;
    });
  }
}

