// Event ingestion (the contract's events section): the event row, its contact,
// lead or sale, counters and processing job commit together.
//
// Idempotency: the event row's INSERT claims its key, ON CONFLICT DO NOTHING on
// UNIQUE (team_id, idempotency_key). A concurrent request with the same key
// waits on that index entry until the first commits, then inserts nothing,
// reads the first id and rolls back whatever it did before (writtenOnce); if
// the first rolls back, the second goes ahead. So one key is one event,
// whatever the timing, and a repeat keeps nothing. Every path takes the
// contact before the key, so two requests sharing a key and a new address
// cannot wait for each other in opposite orders.
import { sql, type Transaction } from 'kysely';
import { PREPARED, type Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import { validationFailed, type ErrorDetail } from '../lib/errors.ts';
import { markUnsubscribed, savedPayload } from '../contacts/queries.ts';
import { isoSqlAnyYear } from '../db/iso.ts';
import { suppressedStatusSql } from '../contacts/suppressions.ts';
import { claimEvent, emit, enqueueEventProcessing, eventWithKey, listenersSql, needsJobSql } from '../events/emit.ts';
import { UUID_RE } from '../http/schemas.ts';
import { normalizeEmail } from '../lib/text.ts';

type Tx = Transaction<Database>;

export const INGEST_EVENT_NAMES = ['contact.saved', 'contact.unsubscribed', 'lead.created', 'sale.created'] as const;
export type IngestEventName = (typeof INGEST_EVENT_NAMES)[number];

export type IngestInput = {
  event_name: IngestEventName;
  email?: string;
  idempotency_key?: string;
  occurred_at?: string;
  payload?: Record<string, unknown>;
};

const MAX_TEXT = 255;

/** Checks what the schema cannot: which fields the event needs and the lead/sale payload fields. */
export function checkIngestInput(body: IngestInput): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  if (body.email === undefined && body.idempotency_key === undefined) {
    details.push({ field: 'email', message: 'email or idempotency_key is required' });
  }
  if (body.email === undefined && (body.event_name === 'contact.saved' || body.event_name === 'contact.unsubscribed')) {
    details.push({ field: 'email', message: `is required for ${body.event_name}` });
  }
  const p = body.payload ?? {};
  if (body.event_name === 'lead.created' || body.event_name === 'sale.created') {
    for (const f of ['source', 'campaign_id', 'campaign_send_id'] as const) {
      if (p[f] === undefined || p[f] === null) continue;
      if (typeof p[f] !== 'string' || (p[f] as string).length > MAX_TEXT) details.push({ field: `payload.${f}`, message: `must be a string of at most ${MAX_TEXT} characters` });
      else if (f !== 'source' && !UUID_RE.test(p[f] as string)) details.push({ field: `payload.${f}`, message: 'must be a UUID' });
    }
  }
  if (body.event_name === 'sale.created') {
    if (p.amount !== undefined && p.amount !== null && (typeof p.amount !== 'number' || !Number.isFinite(p.amount) || Math.abs(p.amount) >= 1e15)) {
      details.push({ field: 'payload.amount', message: 'must be a number' });
    }
    if (p.currency !== undefined && p.currency !== null && (typeof p.currency !== 'string' || !/^[A-Za-z]{3}$/.test(p.currency))) {
      details.push({ field: 'payload.currency', message: 'must be a three-letter ISO 4217 code' });
    }
  }
  if (body.event_name === 'contact.unsubscribed' && p.reason !== undefined && p.reason !== null && typeof p.reason !== 'string') {
    details.push({ field: 'payload.reason', message: 'must be a string' });
  }
  return details;
}

// Who listens to the event each ingestion statement writes (events/emit.ts,
// listenersSql): their events are recorded as emit() records them.
const SAVED_LISTENERS = listenersSql('v.team_id', "'contact.saved'", 'true');
const CONVERSION_LISTENERS = listenersSql('v.team_id', 'v.name', 'v.contact_id IS NOT NULL');
const UNSUBSCRIBE_LISTENERS = listenersSql('v.team_id', 'v.name', 'false', 'v.handled'); // not a campaign trigger
// Their RETURNING: whether the event needs a process_events job (a trigger a campaign lists waits for the decider loop).
const NEEDS_JOB = needsJobSql();
const NEEDS_JOB_UPDATED = needsJobSql('events');

type ContactRow = { id: string; email: string; first_name: string | null; last_name: string | null; phone: string | null;
  foreign_id: string | null; country_code: string | null; status: string; created_at: Date; updated_at: Date; created: boolean };

/** The team's contact for the address, created (active, syntax-validated) when there is none. */
async function ensureContact(tx: Tx, teamId: string, email: string): Promise<ContactRow> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const { rows } = await sql<ContactRow>`${sql.raw(PREPARED)}
      WITH ins AS (
        INSERT INTO contacts (team_id, email, is_email_valid, validation_method, validated_at, status, unsubscribed_at)
        SELECT ${teamId}, ${email}, true, 'syntax', now(), COALESCE(sup.status, 'active'), CASE WHEN sup.status = 'unsubscribed' THEN now() END
          FROM (SELECT ${sql.raw(suppressedStatusSql('$1::uuid', '$2::text'))} AS status) sup
        ON CONFLICT (team_id, email) DO NOTHING
        RETURNING id, email, first_name, last_name, phone, foreign_id, country_code, status, created_at, updated_at
      )
      SELECT ins.*, true AS created FROM ins
      UNION ALL
      SELECT id, email, first_name, last_name, phone, foreign_id, country_code, status, created_at, updated_at, false
        FROM contacts WHERE team_id = ${teamId} AND email = ${email}`.execute(tx);
    // Empty only when a concurrent insert committed after this statement's snapshot; the next statement sees it.
    if (rows[0]) return rows[0];
  }
  throw new Error('contact insert kept racing with concurrent writers');
}


/** Attribution ids must be the team's; the message does not say whether they exist elsewhere. */
async function checkAttribution(tx: Tx, teamId: string, p: Record<string, unknown>): Promise<void> {
  const details: ErrorDetail[] = [];
  if (typeof p.campaign_id === 'string') {
    const { rows } = await sql`SELECT 1 FROM campaigns WHERE team_id = ${teamId} AND id = ${p.campaign_id}`.execute(tx);
    if (!rows.length) details.push({ field: 'payload.campaign_id', message: 'no campaign with this id in this team' });
  }
  if (typeof p.campaign_send_id === 'string') {
    const { rows } = await sql`SELECT 1 FROM campaign_sends WHERE team_id = ${teamId} AND id = ${p.campaign_send_id}`.execute(tx);
    if (!rows.length) details.push({ field: 'payload.campaign_send_id', message: 'no campaign send with this id in this team' });
  }
  if (details.length) throw validationFailed(details, 'invalid event');
}

type Ingested = { eventId: string; duplicate: boolean };

/**
 * Thrown in an event's transaction when its key was taken: everything the
 * transaction did is rolled back. `firstId`: the first event's, read in the
 * transaction after the conflict (undefined if that event went in between:
 * erased or expired, the key is free again).
 */
class KeyTaken extends Error {
  readonly firstId: string | undefined;
  constructor(firstId: string | undefined) {
    super('idempotency key taken');
    this.firstId = firstId;
  }
}

/**
 * Runs `write`, the transaction of one ingested event: its effects first (the
 * contact, before the key, on every path), then the event row, whose INSERT
 * claims the idempotency key (ON CONFLICT DO NOTHING: a concurrent writer of
 * the key is waited for). When the key is taken, `write` throws KeyTaken, its
 * transaction rolls back (a contact it made, an unsubscribe, counters), and
 * the first event's id is the answer. Without a key nothing can conflict.
 */
async function writtenOnce(db: Db, write: (tx: Tx) => Promise<Ingested>): Promise<Ingested> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute(write);
    } catch (e) {
      if (!(e instanceof KeyTaken)) throw e;
      if (e.firstId !== undefined) return { eventId: e.firstId, duplicate: true };
      if (attempt >= 3) throw new Error('an idempotency key kept being taken and freed');
    }
  }
}

/** The KeyTaken of an INSERT that found `key` taken: the first event's id, read in the same transaction. */
async function keyTaken(tx: Tx, teamId: string, key: string): Promise<KeyTaken> {
  return new KeyTaken(await eventWithKey(tx, teamId, key));
}

/**
 * A `contact.saved`: its payload names no row made for it, so the contact
 * comes first and the event row is written once, complete, claiming its key
 * if it has one (writtenOnce). An unsubscribe inserts its row first (to claim
 * its key) and fills it in after: an UPDATE that writes the row, and an entry
 * in each of the events table's indexes, a second time.
 */
async function ingestSaved(db: Db, teamId: string, email: string, input: IngestInput): Promise<Ingested> {
  return writtenOnce(db, async (tx) => {
    const contact = await ensureContact(tx, teamId, email);
    // Without a campaign triggered by it or a webhook subscribed to it, recorded decided and processed, with no job (emit()).
    const { rows } = await sql<{ id: string; pending: boolean }>`${sql.raw(PREPARED)}
      INSERT INTO events (team_id, name, contact_id, payload, occurred_at, input, idempotency_key, processed_at, decided_at)
      SELECT v.team_id, 'contact.saved', ${contact.id}::uuid, ${JSON.stringify(savedPayload(contact))}::jsonb,
             coalesce(${input.occurred_at ?? null}::timestamptz, now()),
             ${input.payload == null ? null : JSON.stringify(input.payload)}::jsonb, ${input.idempotency_key ?? null}::text,
             ${sql.raw(SAVED_LISTENERS.processedAt)}, ${sql.raw(SAVED_LISTENERS.decidedAt)}
        FROM (SELECT ${teamId}::uuid AS team_id) v
       ${sql.raw(SAVED_LISTENERS.join)}
      ON CONFLICT (team_id, idempotency_key) DO NOTHING
      RETURNING id, ${sql.raw(NEEDS_JOB)} AS pending`.execute(tx);
    if (!rows[0]) throw await keyTaken(tx, teamId, input.idempotency_key!);
    if (rows[0].pending) await enqueueEventProcessing(tx, [rows[0].id]);
    return { eventId: rows[0].id, duplicate: false };
  });
}

type Conversion = {
  attribution: { source: string | null; campaign_id: string | null; campaign_send_id: string | null };
  /** A sale's fields (null for a lead). */
  sale: { amount: number | null; currency: string | null } | null;
};

/** A lead's or sale's fields, from a payload checkIngestInput has passed. */
function conversionOf(p: Record<string, unknown>, sale: boolean): Conversion {
  const amount = typeof p.amount === 'number' ? p.amount : null;
  const currency = typeof p.currency === 'string' ? p.currency.toUpperCase() : null;
  return {
    attribution: {
      source: typeof p.source === 'string' ? p.source : null,
      campaign_id: typeof p.campaign_id === 'string' ? p.campaign_id.toLowerCase() : null,
      campaign_send_id: typeof p.campaign_send_id === 'string' ? p.campaign_send_id.toLowerCase() : null,
    },
    sale: sale ? { amount, currency } : null,
  };
}

/** The lead.created / sale.created payload (docs/api.md, "Webhook payloads") but its row id and created_at. */
function conversionPayload(contact: ContactRow | null, c: Conversion): Record<string, unknown> {
  return { contact_id: contact?.id ?? null, email: contact?.email ?? null, ...c.sale, ...c.attribution };
}

/** The contact's lead or sale counters, and the contact.saved of a contact the conversion created. */
async function countConversion(tx: Tx, teamId: string, contact: ContactRow | null, sale: boolean, at: Date): Promise<void> {
  if (!contact) return;
  // first/last by the conversion's own time, so a late-arriving older event does not move last_*.
  await (sale
    ? sql`${sql.raw(PREPARED)} UPDATE contacts SET sales_count = sales_count + 1, first_sale_at = least(first_sale_at, ${at}),
            last_sale_at = greatest(last_sale_at, ${at}), updated_at = now() WHERE id = ${contact.id} AND team_id = ${teamId}`
    : sql`${sql.raw(PREPARED)} UPDATE contacts SET leads_count = leads_count + 1, first_lead_at = least(first_lead_at, ${at}),
            last_lead_at = greatest(last_lead_at, ${at}), updated_at = now() WHERE id = ${contact.id} AND team_id = ${teamId}`
  ).execute(tx);
  // A contact the conversion created was saved: the same event an upsert would emit.
  if (contact.created) await emit(tx, [{ teamId, name: 'contact.saved', contactId: contact.id, payload: savedPayload(contact) }]);
}

/**
 * A lead or sale: its event row is written once, complete, with its leads or
 * sales row, in one statement, claiming its key if it has one (writtenOnce).
 * An unsubscribe claims its row first and fills it in after: an UPDATE that
 * writes the row and an entry in each of the events table's indexes a second
 * time (as ingestSaved avoids for contact.saved). The payload's created_at is
 * the event's time written by SQL as JavaScript writes it, in any year (an
 * occurred_at in year 1 or 9999 may fall in UTC year 0 or 10000).
 */
async function ingestConversion(db: Db, teamId: string, email: string | undefined, input: IngestInput): Promise<Ingested> {
  const sale = input.event_name === 'sale.created';
  const p = input.payload ?? {};
  const c = conversionOf(p, sale);
  return writtenOnce(db, async (tx) => {
    await checkAttribution(tx, teamId, p);
    const contact = email ? await ensureContact(tx, teamId, email) : null;
    // Both rows' ids are made first (the event's payload names the lead or
    // sale, which names the event); the foreign key is checked at the statement's
    // end. The row only with its event (a taken key writes neither). Its
    // created_at in milliseconds, as a Date holds it (the counters' time).
    const conversion = sale
      ? sql`INSERT INTO sales (id, team_id, contact_id, event_id, amount, currency, source, campaign_id, campaign_send_id, created_at)
            SELECT v.row_id, v.team_id, v.contact_id, v.event_id, ${c.sale!.amount}::numeric, ${c.sale!.currency}::text, ${c.attribution.source}::text,
                   ${c.attribution.campaign_id}::uuid, ${c.attribution.campaign_send_id}::uuid, date_trunc('milliseconds', v.at)
              FROM v WHERE EXISTS (SELECT 1 FROM ev)`
      : sql`INSERT INTO leads (id, team_id, contact_id, event_id, source, campaign_id, campaign_send_id, created_at)
            SELECT v.row_id, v.team_id, v.contact_id, v.event_id, ${c.attribution.source}::text,
                   ${c.attribution.campaign_id}::uuid, ${c.attribution.campaign_send_id}::uuid, date_trunc('milliseconds', v.at)
              FROM v WHERE EXISTS (SELECT 1 FROM ev)`;
    // As emit() records it: processed (no job) when nothing handles it, decided
    // when it has a contact and no campaign of the team lists it.
    const { rows } = await sql<{ id: string; occurred_at: Date; pending: boolean }>`${sql.raw(PREPARED)}
      WITH v AS MATERIALIZED (
        SELECT plover_uuid_v7() AS event_id, plover_uuid_v7() AS row_id, ${teamId}::uuid AS team_id,
               ${input.event_name}::text AS name, ${contact?.id ?? null}::uuid AS contact_id,
               coalesce(${input.occurred_at ?? null}::timestamptz, now()) AS at
      ),
      ev AS (
        INSERT INTO events (id, team_id, name, contact_id, payload, occurred_at, input, idempotency_key, processed_at, decided_at)
        SELECT v.event_id, v.team_id, v.name, v.contact_id,
               ${JSON.stringify(conversionPayload(contact, c))}::jsonb
                 || jsonb_build_object(${sql.lit(sale ? 'sale_id' : 'lead_id')}, v.row_id, 'created_at', ${sql.raw(isoSqlAnyYear('v.at'))}),
               v.at, ${input.payload == null ? null : JSON.stringify(input.payload)}::jsonb, ${input.idempotency_key ?? null}::text,
               ${sql.raw(CONVERSION_LISTENERS.processedAt)}, ${sql.raw(CONVERSION_LISTENERS.decidedAt)}
          FROM v ${sql.raw(CONVERSION_LISTENERS.join)}
        ON CONFLICT (team_id, idempotency_key) DO NOTHING
        RETURNING id, occurred_at, ${sql.raw(NEEDS_JOB)} AS pending
      ),
      conversion AS (${conversion})
      SELECT id, occurred_at, pending FROM ev`.execute(tx);
    const ev = rows[0];
    if (!ev) throw await keyTaken(tx, teamId, input.idempotency_key!);
    await countConversion(tx, teamId, contact, sale, ev.occurred_at);
    if (ev.pending) await enqueueEventProcessing(tx, [ev.id]);
    return { eventId: ev.id, duplicate: false };
  });
}

/**
 * A `contact.unsubscribed`: its payload's unsubscribed_at is the change's time
 * (or the event's, when the contact was unsubscribed already), so the row is
 * inserted first, claiming its key, and filled in after the change. Its
 * contact too comes before the key (writtenOnce).
 */
async function ingestUnsubscribe(db: Db, teamId: string, email: string, input: IngestInput): Promise<Ingested> {
  const p = input.payload ?? {};
  return writtenOnce(db, async (tx) => {
    const contact = await ensureContact(tx, teamId, email);
    const ev = await claimEvent(tx, { teamId, name: input.event_name, key: input.idempotency_key, occurredAt: input.occurred_at, input: input.payload ?? null });
    if (ev.duplicate) throw new KeyTaken(ev.id);
    const reason = typeof p.reason === 'string' ? p.reason : null;
    const { changed: rows } = await markUnsubscribed(tx, teamId, [contact.email], reason);
    // Already unsubscribed: recorded, but no second email.contact.unsubscribed webhook (handled false).
    const payload = {
      contact_id: contact.id, email: contact.email, unsubscribed_at: (rows[0]?.unsubscribed_at ?? ev.occurred_at).toISOString(),
      unsubscribe_reason: reason, unsubscribe_method: 'api',
    };
    // As emit() records it: processed (no job) when nothing handles it.
    const { rows: done } = await sql<{ pending: boolean }>`${sql.raw(PREPARED)}
      UPDATE events SET contact_id = v.contact_id, payload = ${JSON.stringify(payload)}::jsonb,
             processed_at = ${sql.raw(UNSUBSCRIBE_LISTENERS.processedAt)}, decided_at = ${sql.raw(UNSUBSCRIBE_LISTENERS.decidedAt)}
        FROM (SELECT ${teamId}::uuid AS team_id, ${input.event_name}::text AS name, ${contact.id}::uuid AS contact_id,
                     ${rows.length > 0}::boolean AS handled) v
       ${sql.raw(UNSUBSCRIBE_LISTENERS.join)}
       WHERE events.id = ${ev.id} AND events.team_id = v.team_id
      RETURNING ${sql.raw(NEEDS_JOB_UPDATED)} AS pending`.execute(tx);
    if (done[0]!.pending) await enqueueEventProcessing(tx, [ev.id]);
    return { eventId: ev.id, duplicate: false };
  });
}

/** Records one ingested event with its effects; a repeated idempotency_key returns the first event and does nothing. */
export async function ingestEvent(db: Db, teamId: string, input: IngestInput): Promise<Ingested> {
  const email = input.email === undefined ? undefined : normalizeEmail(input.email);
  if (input.event_name === 'lead.created' || input.event_name === 'sale.created') return ingestConversion(db, teamId, email, input);
  // checkIngestInput requires the address for these two.
  if (email === undefined) throw validationFailed([{ field: 'email', message: `is required for ${input.event_name}` }], 'invalid event');
  return input.event_name === 'contact.saved' ? ingestSaved(db, teamId, email, input) : ingestUnsubscribe(db, teamId, email, input);
}
