// The delivery log as a queue: fan-out inserts one row per (event, webhook),
// dispatchers claim due rows in batches with a lease and write each attempt's
// result back in one set-based statement. All SQL of deliveries lives here.
import { sql, type Selectable, type Transaction } from 'kysely';
import { isoSql, isoSqlAnyYear } from '../db/iso.ts';
import { PREPARED, type Db } from '../db/pool.ts';
import { idsRecordset, recordset } from '../db/recordset.ts';
import type { Database } from '../db/schema.ts';
import type { AttemptLogEntry, WebhookDeliveriesTable } from '../db/schema-webhooks.ts';
import type { EventRow } from '../events/process.ts';
import { webhookEventName } from '../events/emit.ts';
import { paginate } from '../lib/paginate.ts';
import { bucketOf } from '../stats/deltas.ts';
import { latencyBinOf } from './stats.ts';
import { idIn } from '../db/ids.ts';

export type DeliveryRow = Selectable<WebhookDeliveriesTable>;

/** NOTIFY channel that wakes the delivery dispatchers (new deliveries, an enable, a resend). */
export const DELIVERY_CHANNEL = 'plover_webhook_deliveries';

/** Retry-After is honoured up to this long (the longest retry delay, docs/api.md "Retries"). */
export const MAX_RETRY_AFTER_S = 6 * 3600;
/** Response bodies are kept up to this many bytes. */
export const RESPONSE_BODY_LIMIT = 4096;

export type DeliveryView = {
  id: string;
  webhook_id: string;
  event: string;
  payload: Record<string, unknown>;
  status: 'pending' | 'success' | 'failed';
  response_code: number | null;
  response_body: string | null;
  attempts: number;
  attempted_at: string[];
  attempt_log: AttemptLogEntry[];
  next_attempt_at: string | null;
  last_error: string | null;
  simulated: boolean;
  created_at: string;
  updated_at: string;
};

/**
 * The envelope (docs/api.md, "Delivery envelope") of a delivery row (`table`: its name or alias in
 * the query): the stored one, or built from its event. Deterministic, so every
 * retry and resend sends the same bytes. The timestamp is the event's
 * occurred_at, which a client may set in UTC year 0 or 10000: written as
 * JavaScript writes it, as the payload's own times are.
 */
export function envelopeOf(table: string) {
  const t = sql.table(table);
  return sql<Record<string, unknown> | null>`coalesce(${t}.payload, (
    SELECT json_build_object('id', ${t}.id, 'event', ${t}.event, 'team_id', ${t}.team_id,
      'timestamp', ${sql.raw(isoSqlAnyYear('e.occurred_at'))},
      'payload', e.payload)
    FROM events e WHERE e.id = ${t}.event_id))`;
}

export function toDeliveryView(row: DeliveryRow): DeliveryView {
  return {
    id: row.id,
    webhook_id: row.webhook_id,
    event: row.event,
    payload: row.payload ?? {},
    status: row.status,
    response_code: row.response_code,
    response_body: row.response_body,
    attempts: row.attempts,
    attempted_at: row.attempted_at.map((d) => d.toISOString()),
    attempt_log: row.attempt_log,
    next_attempt_at: row.next_attempt_at ? row.next_attempt_at.toISOString() : null,
    last_error: row.last_error,
    simulated: row.simulated,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/**
 * Fan-out: one delivery per (event, subscribed webhook of its team), in one
 * statement per event batch. Idempotent: UNIQUE (event_id, webhook_id) makes
 * a retried job insert nothing twice. The envelope's id is the delivery id, so
 * every retry and resend repeats it (envelopeOf).
 *
 * A disabled webhook gets its deliveries parked (next_attempt_at NULL): they
 * wait for the enable, bounded by the paused-backlog limits (backlog.ts).
 */
export async function enqueueDeliveries(db: Db | Transaction<Database>, events: Pick<EventRow, 'id'>[]): Promise<number> {
  if (events.length === 0) return 0;
  const ids = events.map((e) => e.id);
  // One statement, no explicit transaction: it runs once per process_events job,
  // and a burst of single-event jobs (POST /email/events) paid BEGIN and COMMIT
  // round trips for a team without webhooks (bench/campaigns.ts). The NOTIFY
  // is delivered at the statement's commit, after the rows are visible.
  const { rows } = await sql<{ n: number; parked_hooks: string[] | null }>`${sql.raw(PREPARED)}
    WITH ev AS (
      SELECT e.id AS event_id, e.team_id, e.contact_id,
             ${webhookEventName('e.name')} AS hook_event,
             CASE WHEN e.name = 'webhook.disabled' THEN (e.payload ->> 'webhook_id')::uuid END AS about_webhook
      FROM events e
      WHERE ${idIn('e.id', ids)}
    ), ins AS (
      INSERT INTO webhook_deliveries (id, team_id, webhook_id, event_id, contact_id, event, next_attempt_at)
      SELECT plover_uuid_v7(), ev.team_id, w.id, ev.event_id, ev.contact_id, ev.hook_event, CASE WHEN w.is_enabled THEN now() END
      FROM ev JOIN webhooks w ON w.team_id = ev.team_id AND ev.hook_event = ANY (w.events)
      -- webhook.disabled goes to the team's other endpoints, not to the failing one.
      WHERE w.id IS DISTINCT FROM ev.about_webhook
      -- In key order: two fan-outs of the same events (a retried job, or a job
      -- beside the decider loop's batch) wait for each other in one order, never
      -- in a cycle.
      ORDER BY ev.event_id, w.id
      ON CONFLICT (event_id, webhook_id) DO NOTHING
      RETURNING webhook_id, next_attempt_at
    )
    SELECT count(*)::int AS n,
           array_agg(DISTINCT webhook_id) FILTER (WHERE next_attempt_at IS NULL) AS parked_hooks,
           CASE WHEN count(next_attempt_at) > 0 THEN pg_notify(${DELIVERY_CHANNEL}, '') END AS notified
    FROM ins`.execute(db);
  const parked = rows[0]?.parked_hooks ?? [];
  // An enable that committed while the insert ran (it waited on the insert's
  // foreign-key lock, or the insert's snapshot predates it) unparked before
  // these rows existed: make them due now, else they would wait for the next
  // disable/enable. Statements after the insert see the enable's commit.
  if (parked.length > 0) {
    await sql`
      WITH due AS (
        UPDATE webhook_deliveries d SET next_attempt_at = now()
        FROM webhooks w
        WHERE w.id = ANY(${parked}::uuid[]) AND w.is_enabled AND d.webhook_id = w.id AND d.team_id = w.team_id
          AND d.event_id = ANY(${ids}::uuid[]) AND d.status = 'pending' AND d.next_attempt_at IS NULL
        RETURNING 1
      )
      SELECT CASE WHEN count(*) > 0 THEN pg_notify(${DELIVERY_CHANNEL}, '') END FROM due`.execute(db);
  }
  return rows[0]?.n ?? 0;
}

export type ClaimedDelivery = {
  id: string;
  team_id: string;
  webhook_id: string;
  /** Null only when its event row is gone. */
  payload: Record<string, unknown> | null;
  sequence_attempts: number;
  max_attempts: number;
  url: string;
  secret_enc: Buffer;
  lease: Date;
};

/**
 * Claims up to `limit` due deliveries for `leaseMs`. SKIP LOCKED lets many
 * dispatchers claim side by side without waiting on each other; the lease makes
 * a claim by a killed worker claimable again once it runs out. Deliveries of a
 * disabled webhook are parked (next_attempt_at NULL) by the disable itself, so
 * the due scan is one ordered index range with no join. One that slipped
 * through a concurrent disable is parked here instead of being sent.
 *
 * One statement (plover_claim_webhook_deliveries, migrations 0029 and 0032), with bitmap
 * scans off inside it: a queue table's statistics are always stale, and with
 * them the planner read and sorted every due row for each claim (13 ms per 100
 * with 10,000 queued) where the ordered index scan with LIMIT stops after 100
 * rows. The envelope is built here around the claimed rows.
 */
export async function claimDueDeliveries(db: Db, limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
  // Prepared (src/db/pool.ts), as the result statement below: a dispatcher
  // runs them for every batch, and an unnamed statement is parsed, analysed
  // and planned at every call.
  const { rows } = await sql<ClaimedDelivery & { is_enabled: boolean }>`${sql.raw(PREPARED)}
    SELECT c.id, c.team_id, c.webhook_id, ${envelopeOf('c')} AS payload, c.sequence_attempts, c.max_attempts,
           c.url, c.secret_enc, c.lease, c.is_enabled
    FROM plover_claim_webhook_deliveries(${limit}::int, ${leaseMs}::int) c`.execute(db);
  return rows.filter((r) => r.is_enabled);
}

/** Seconds until the next delivery falls due (null: none pending). */
export async function secondsUntilNextDue(db: Db): Promise<number | null> {
  const { rows } = await sql<{ s: number | null }>`
    SELECT extract(epoch FROM greatest(next_attempt_at, coalesce(locked_until, next_attempt_at)) - now())::float8 AS s
    FROM webhook_deliveries
    WHERE status = 'pending' AND next_attempt_at IS NOT NULL
    ORDER BY next_attempt_at
    LIMIT 1`.execute(db);
  return rows[0]?.s ?? null;
}

/** Parks the pending deliveries of a disabled webhook; they wait without being scanned. */
export async function parkDeliveries(tx: Transaction<Database>, webhookIds: string[]): Promise<void> {
  await sql`
    UPDATE webhook_deliveries SET next_attempt_at = NULL
    WHERE webhook_id = ANY(${webhookIds}::uuid[]) AND status = 'pending' AND next_attempt_at IS NOT NULL`.execute(tx);
}

/**
 * Makes the parked deliveries of a re-enabled webhook due now, oldest first:
 * each is due one microsecond after the one created before it, so the claim
 * (ordered by next_attempt_at) drains the backlog in (created_at, id) order
 * while the whole backlog of 100,000 is due within 0.1 s.
 */
export async function unparkDeliveries(tx: Transaction<Database>, teamId: string, webhookId: string): Promise<number> {
  const res = await sql`
    UPDATE webhook_deliveries d SET next_attempt_at = now() + o.rn * interval '1 microsecond'
    FROM (SELECT id, row_number() OVER (ORDER BY created_at, id) AS rn
          FROM webhook_deliveries
          WHERE webhook_id = ${webhookId} AND team_id = ${teamId} AND status = 'pending' AND next_attempt_at IS NULL) o
    WHERE d.id = o.id`.execute(tx);
  return Number(res.numAffectedRows ?? 0);
}

export type AttemptResult = {
  id: string;
  webhook_id: string;
  lease: Date;
  at: Date;
  status: 'pending' | 'success' | 'failed';
  response_code: number | null;
  response_body: string | null;
  error: string | null;
  duration_ms: number;
  next_attempt_at: Date | null;
  /** The receiver answered 410 Gone: disable the webhook. */
  gone: boolean;
};

/**
 * Records a batch of attempts in one statement, only where the claim is still
 * ours (same lease): a resend or a re-claim after an expired lease wins.
 * Successes stamp last_success_at; a 410 disables its webhook.
 */
export async function recordAttempts(db: Db, results: AttemptResult[]): Promise<void> {
  if (results.length === 0) return;
  const rows = results.map((r) => ({
    id: r.id,
    lease: r.lease.toISOString(),
    at: r.at.toISOString(),
    status: r.status,
    code: r.response_code,
    body: r.response_body,
    error: r.error,
    duration_ms: r.duration_ms,
    next_at: r.next_attempt_at ? r.next_attempt_at.toISOString() : null,
  }));
  const successes = [...new Set(results.filter((r) => r.status === 'success').map((r) => r.webhook_id))];
  const gone = [...new Set(results.filter((r) => r.gone).map((r) => r.webhook_id))];
  const hooks = [...new Set(results.map((r) => r.webhook_id))].sort();
  await db.transaction().execute(async (tx) => {
    // The webhooks first, in id order, then their deliveries: the order of a
    // disable, enable or delete (queries.ts: the webhook row, then parking or
    // unparking its deliveries). Deliveries first and the webhook's counters
    // after deadlocked with a disable landing while a failed attempt was
    // recorded (PostgreSQL aborted one: the disable answered 500), and two
    // dispatchers recording the same webhooks could lock them in two orders.
    // FOR NO KEY UPDATE, what the updates below take anyway: the fan-out's
    // foreign-key checks (FOR KEY SHARE) do not wait for it.
    await sql`${sql.raw(PREPARED)}
      SELECT 1 FROM webhooks WHERE id IN (SELECT x.id FROM ${idsRecordset(hooks)} AS x) ORDER BY id FOR NO KEY UPDATE`.execute(tx);
    // The attempts recorded (same lease) also add to the webhook's statistics
    // (webhook-stats.ts), in the same statement. The batch is a sized recordset
    // (src/db/recordset.ts): prepared, its generic plan probes the deliveries by
    // key at any table size.
    await sql`${sql.raw(PREPARED)}
      WITH u AS (
      UPDATE webhook_deliveries d SET
        status = r.status,
        attempts = d.attempts + 1,
        sequence_attempts = d.sequence_attempts + 1,
        attempted_at = d.attempted_at || r.at,
        attempt_log = d.attempt_log || jsonb_build_array(jsonb_build_object(
          'at', ${sql.raw(isoSql('r.at'))},
          'response_code', r.code, 'duration_ms', r.duration_ms, 'error', r.error)),
        response_code = r.code,
        response_body = r.body,
        last_error = r.error,
        -- A disable that landed while the attempt was out parked the row
        -- (next_attempt_at NULL; a claimed row keeps its due time): its retry
        -- stays parked until the enable, instead of being sent while disabled.
        next_attempt_at = CASE WHEN d.next_attempt_at IS NULL AND r.status = 'pending' THEN NULL ELSE r.next_at END,
        locked_until = NULL,
        updated_at = now()
      FROM ${recordset(JSON.stringify(rows), rows.length,
        'r (id uuid, lease timestamptz, at timestamptz, status text, code int, body text, error text, duration_ms int, next_at timestamptz)')} AS r
      WHERE d.id = r.id AND d.locked_until = r.lease
      RETURNING d.team_id, d.webhook_id, r.at, r.code, r.duration_ms
      )
      INSERT INTO webhook_stats_deltas (team_id, webhook_id, bucket, bin, attempts, succeeded)
      SELECT team_id, webhook_id, ${bucketOf(sql`at`)}, ${latencyBinOf(sql`duration_ms`)}, count(*),
             count(*) FILTER (WHERE code BETWEEN 200 AND 299)
        FROM u GROUP BY 1, 2, 3, 4`.execute(tx);
    if (successes.length > 0) {
      const lastAt = new Date(Math.max(...results.filter((r) => r.status === 'success').map((r) => r.at.getTime()))).toISOString();
      await sql`${sql.raw(PREPARED)}
        UPDATE webhooks SET last_success_at = greatest(coalesce(last_success_at, '-infinity'), ${lastAt}::timestamptz),
                            failing_since = NULL, failures_since_success = 0
        WHERE ${idIn('id', successes)}`.execute(tx);
    }
    // The failing streak of webhooks with no success in this batch, read by
    // the auto-disable check (auto-disable.ts). Only where the attempt was
    // recorded (same lease), as above.
    const failures = streaksOf(results.filter((r) => r.status !== 'success' && !successes.includes(r.webhook_id)));
    if (failures.length > 0) {
      await sql`
        UPDATE webhooks w SET failing_since = coalesce(w.failing_since, f.first_at),
                              last_failure_at = greatest(coalesce(w.last_failure_at, '-infinity'), f.last_at),
                              failures_since_success = w.failures_since_success + f.n
        FROM jsonb_to_recordset(${JSON.stringify(failures)}::jsonb) AS f(webhook_id uuid, first_at timestamptz, last_at timestamptz, n int)
        WHERE w.id = f.webhook_id`.execute(tx);
    }
    if (gone.length > 0) {
      await sql`
        UPDATE webhooks SET is_enabled = false, disabled_reason = 'the receiver answered 410 Gone', updated_at = now()
        WHERE id = ANY(${gone}::uuid[]) AND is_enabled`.execute(tx);
      await parkDeliveries(tx, gone);
    }
  });
}

/** Per webhook: first and last failed attempt of the batch and their number, in id order (the lock order). */
function streaksOf(failed: AttemptResult[]) {
  const by = new Map<string, { webhook_id: string; first_at: string; last_at: string; n: number }>();
  for (const r of failed) {
    const at = r.at.toISOString();
    const s = by.get(r.webhook_id);
    if (!s) by.set(r.webhook_id, { webhook_id: r.webhook_id, first_at: at, last_at: at, n: 1 });
    else {
      if (at < s.first_at) s.first_at = at;
      if (at > s.last_at) s.last_at = at;
      s.n++;
    }
  }
  return [...by.values()].sort((a, b) => (a.webhook_id < b.webhook_id ? -1 : 1));
}

export type DeliveryFilter = { status?: 'pending' | 'success' | 'failed'; event?: string; page: number; perPage: number };

export async function listDeliveries(db: Db, teamId: string, webhookId: string, f: DeliveryFilter) {
  let q = db.selectFrom('webhook_deliveries').where('team_id', '=', teamId).where('webhook_id', '=', webhookId);
  if (f.status) q = q.where('status', '=', f.status);
  if (f.event) q = q.where('event', '=', f.event);
  return paginate(
    f,
    async () => (await q.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n,
    (limit, offset) =>
      q.selectAll().select(envelopeOf('webhook_deliveries').as('payload')).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset).execute(),
  );
}

/** What a resend queued: the next attempt of the delivery, due now (the answer of the resend route). */
export type QueuedAttempt = { number: number; status: 'queued'; due_at: string; max_attempts: number };

export function queuedAttemptOf(row: DeliveryRow): QueuedAttempt {
  return {
    number: row.attempts + 1,
    status: 'queued',
    due_at: (row.next_attempt_at ?? row.updated_at).toISOString(),
    max_attempts: row.max_attempts,
  };
}

/** Starts a fresh attempt sequence for the same envelope id, due now. */
export async function resendDelivery(db: Db, teamId: string, webhookId: string, id: string): Promise<DeliveryRow | undefined> {
  return db.transaction().execute(async (tx) => {
    const row = await tx
      .updateTable('webhook_deliveries')
      .set({
        status: 'pending',
        sequence_attempts: 0,
        max_attempts: 7,
        next_attempt_at: sql<Date>`now()`,
        locked_until: null,
        updated_at: sql<Date>`now()`,
      })
      .where('team_id', '=', teamId)
      .where('webhook_id', '=', webhookId)
      .where('id', '=', id)
      .returningAll()
      .returning(envelopeOf('webhook_deliveries').as('payload'))
      .executeTakeFirst();
    if (row) await sql`SELECT pg_notify(${DELIVERY_CHANNEL}, '')`.execute(tx);
    return row;
  });
}

/**
 * A simulated delivery: logged like any other, a single attempt made at once by
 * the caller (leased to it for `leaseMs`, so no dispatcher picks it up).
 */
export async function insertSimulatedDelivery(
  db: Db,
  d: { id: string; teamId: string; webhookId: string; event: string; envelope: Record<string, unknown>; leaseMs: number },
): Promise<{ lease: Date }> {
  const { rows } = await sql<{ lease: Date }>`
    INSERT INTO webhook_deliveries (id, team_id, webhook_id, event, payload, max_attempts, next_attempt_at, locked_until, simulated)
    VALUES (${d.id}, ${d.teamId}, ${d.webhookId}, ${d.event}, ${JSON.stringify(d.envelope)}::json, 1, now(),
            date_trunc('milliseconds', now() + ${d.leaseMs} * interval '1 millisecond'), true)
    RETURNING locked_until AS lease`.execute(db);
  return rows[0]!;
}

export async function findDelivery(db: Db, teamId: string, id: string): Promise<DeliveryRow | undefined> {
  return db
    .selectFrom('webhook_deliveries')
    .selectAll()
    .select(envelopeOf('webhook_deliveries').as('payload'))
    .where('team_id', '=', teamId)
    .where('id', '=', id)
    .executeTakeFirst();
}
