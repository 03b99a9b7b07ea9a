// Webhook management (docs/api.md, "Webhooks"). The limit of 10 enabled webhooks per
// team is checked under a row lock on the team, so concurrent creates and
// enables of one team run one after another and no race lets an 11th through.
import { sql, type Selectable, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import type { WebhooksTable } from '../db/schema-webhooks.ts';
import { AppError } from '../lib/errors.ts';
import { SecretBox } from '../lib/secrets.ts';
import { DELIVERY_CHANNEL, parkDeliveries, unparkDeliveries } from './deliveries.ts';
import { newWebhookSecret } from './signing.ts';
import { paginate, type PageRequest } from '../lib/paginate.ts';

export const MAX_ENABLED_WEBHOOKS = 10;

/** A webhook with the number of its deliveries waiting to be sent (parked ones included). */
export type WebhookRow = Selectable<WebhooksTable> & { pending_count: number };

/**
 * pending_count of the webhook in the enclosing query, as an index-only count
 * on webhook_deliveries_pending_idx (it holds only pending rows, so the count
 * reads the queue, never the log). Measured in docs/decisions.md "Pause and
 * recover"; a paused backlog is capped (WEBHOOK_PAUSED_BACKLOG_MAX), and so is
 * this count's cost.
 */
const pendingCount = sql<number>`(SELECT count(*)::int FROM webhook_deliveries pd WHERE pd.webhook_id = webhooks.id AND pd.status = 'pending')`;

async function countPending(db: Db | Transaction<Database>, teamId: string, id: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = ${id} AND team_id = ${teamId} AND status = 'pending'`.execute(db);
  return rows[0]?.n ?? 0;
}

export type WebhookView = {
  id: string;
  url: string;
  events: string[];
  secret?: string;
  is_enabled: boolean;
  source: string | null;
  locked: boolean;
  description: string | null;
  last_success_at: string | null;
  pending_count: number;
  created_at: string;
  updated_at: string;
};

export type WebhookInput = {
  url: string;
  events: string[];
  source?: string | null;
  description?: string | null;
  is_enabled?: boolean;
};

export type WebhookPatch = Partial<WebhookInput>;

export function webhookSecretBox(appSecret: string | undefined): SecretBox {
  // main.ts always supplies one (APP_SECRET, or the embedded database's own).
  if (!appSecret) throw new Error('APP_SECRET is not configured');
  return new SecretBox(appSecret, 'webhook-secret');
}

export function toWebhookView(row: WebhookRow, box: SecretBox | null): WebhookView {
  return {
    id: row.id,
    url: row.url,
    events: row.events,
    ...(box ? { secret: box.open(row.secret_enc) } : {}),
    is_enabled: row.is_enabled,
    source: row.source,
    locked: row.source !== null,
    description: row.description,
    last_success_at: row.last_success_at ? row.last_success_at.toISOString() : null,
    pending_count: row.pending_count,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

function limitExceeded(): AppError {
  return new AppError(
    'MAX_WEBHOOKS_EXCEEDED',
    `a team can have at most ${MAX_ENABLED_WEBHOOKS} enabled webhooks; disable or delete one first`,
  );
}

async function lockTeamAndCountEnabled(tx: Transaction<Database>, teamId: string): Promise<number> {
  await sql`SELECT 1 FROM teams WHERE id = ${teamId} FOR UPDATE`.execute(tx);
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM webhooks WHERE team_id = ${teamId} AND is_enabled`.execute(tx);
  return rows[0]!.n;
}

/** Events are stored once each, in catalog order of first mention. */
function uniqueEvents(events: string[]): string[] {
  return [...new Set(events)];
}

export async function createWebhook(db: Db, box: SecretBox, teamId: string, input: WebhookInput): Promise<WebhookRow> {
  const enabled = input.is_enabled ?? true;
  return db.transaction().execute(async (tx) => {
    if (enabled && (await lockTeamAndCountEnabled(tx, teamId)) >= MAX_ENABLED_WEBHOOKS) throw limitExceeded();
    const row = await tx
      .insertInto('webhooks')
      .values({
        team_id: teamId,
        url: input.url,
        events: uniqueEvents(input.events),
        secret_enc: box.seal(newWebhookSecret()),
        is_enabled: enabled,
        source: input.source ?? null,
        description: input.description ?? null,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    return { ...row, pending_count: 0 };
  });
}

export async function findWebhook(db: Db | Transaction<Database>, teamId: string, id: string): Promise<WebhookRow | undefined> {
  return db.selectFrom('webhooks').selectAll().select(pendingCount.as('pending_count')).where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
}

export async function listWebhooks(db: Db, teamId: string, opts: PageRequest) {
  return paginate(
    opts,
    async () => (await db.selectFrom('webhooks').select((eb) => eb.fn.countAll<number>().as('n')).where('team_id', '=', teamId).executeTakeFirstOrThrow()).n,
    (limit, offset) =>
      db
        .selectFrom('webhooks')
        .selectAll()
        .select(pendingCount.as('pending_count'))
        .where('team_id', '=', teamId)
        .orderBy('created_at', 'desc')
        .orderBy('id', 'desc')
        .limit(limit)
        .offset(offset)
        .execute(),
  );
}

/**
 * Applies a patch. `is_enabled: true` on a disabled webhook is an enable: limit
 * check and a new secret; nothing else changes the secret. Enabling makes the
 * paused backlog due, oldest first, and wakes the dispatchers so it goes out
 * at once. The FOR UPDATE on the webhook row orders the enable against the
 * backlog bound and recover (backlog.ts), which lock it too.
 */
export async function updateWebhook(
  db: Db,
  box: SecretBox,
  teamId: string,
  id: string,
  patch: WebhookPatch,
): Promise<WebhookRow | undefined> {
  return db.transaction().execute(async (tx) => {
    const enabling = patch.is_enabled === true;
    const enabledCount = enabling ? await lockTeamAndCountEnabled(tx, teamId) : 0;
    const current = await tx
      .selectFrom('webhooks')
      .selectAll()
      .where('team_id', '=', teamId)
      .where('id', '=', id)
      .forUpdate()
      .executeTakeFirst();
    if (!current) return undefined;
    const turnsOn = enabling && !current.is_enabled;
    const turnsOff = patch.is_enabled === false && current.is_enabled;
    if (turnsOn && enabledCount >= MAX_ENABLED_WEBHOOKS) throw limitExceeded();
    const changes: Record<string, unknown> = {};
    if (patch.url !== undefined) changes.url = patch.url;
    if (patch.events !== undefined) changes.events = uniqueEvents(patch.events);
    if (patch.source !== undefined) changes.source = patch.source;
    if (patch.description !== undefined) changes.description = patch.description;
    if (turnsOn) {
      changes.is_enabled = true;
      changes.secret_enc = box.seal(newWebhookSecret());
      changes.disabled_reason = null;
      // A fresh start: the failing streak that disabled it is over.
      changes.auto_disabled_at = null;
      changes.failing_since = null;
      changes.failures_since_success = 0;
    }
    if (turnsOff) changes.is_enabled = false;
    if (Object.keys(changes).length === 0) return { ...current, pending_count: await countPending(tx, teamId, id) };
    const row = await tx
      .updateTable('webhooks')
      .set({ ...changes, updated_at: sql<Date>`now()` })
      .where('id', '=', id)
      .returningAll()
      .executeTakeFirstOrThrow();
    if (turnsOff) await parkDeliveries(tx, [id]);
    if (turnsOn) {
      await unparkDeliveries(tx, teamId, id);
      await sql`SELECT pg_notify(${DELIVERY_CHANNEL}, '')`.execute(tx);
    }
    return { ...row, pending_count: await countPending(tx, teamId, id) };
  });
}

/** Deletes the webhook; its deliveries go with it (pending ones are cancelled). */
export async function deleteWebhook(db: Db, teamId: string, id: string): Promise<boolean> {
  const res = await db.deleteFrom('webhooks').where('team_id', '=', teamId).where('id', '=', id).executeTakeFirst();
  return Number(res.numDeletedRows) > 0;
}

/** The webhook's current signing secret (dispatcher and simulate). */
export function openSecret(box: SecretBox, row: Pick<WebhookRow, 'secret_enc'>): string {
  return box.open(row.secret_enc);
}
