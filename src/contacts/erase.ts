// Erasure of one address of a team (a GDPR request): every row that holds the
// address, or the contact's personal data, is deleted or scrubbed; anonymous
// counts stay; the address stays suppressed through its keyed hash only.
//
// What happens to each kind of row (docs/decisions.md, "Erasing a contact or an address"):
// - contacts: deleted (their counters go with them);
// - messages (email_send_log): kept for the counts (campaign pages, send
//   totals, daily usage) but anonymised: the address becomes ERASED_ADDRESS,
//   name, subject, render input, SMTP answers and the contact link are cleared,
//   tracking is switched off, and a message not yet sent is cancelled;
// - tracking hits of those messages (IP, user agent, URL): deleted;
// - events about the contact or naming the address in their payload: deleted,
//   with their webhook deliveries (payload copies, receiver answers, attempt
//   logs), so a pending delivery never sends the data after the erasure;
// - leads and sales: kept for revenue counts, unlinked from contact and event;
// - campaign decisions of the contact: deleted (they exist to pace its mail);
// - transactional idempotency records that answer with the address: deleted
//   (a retry with the same key is then refused by the suppression below);
// - import errors that quote the address: the address is replaced;
// - suppressions: a row in clear is replaced by one keyed hash, reason
//   `erased`, which every send path checks, so the address is never mailed again.
//
// One transaction of set-based statements, each found through an index on the
// team and the address (or the contact's id, or the rows found first): the
// cost is linear in the subject's rows, never in the table's. Measured (see
// docs/decisions.md): a contact with 100,000 messages, 100,000 events and
// 100,000 tracking hits erases in a few seconds; the locks it takes are the
// subject's own rows, which nothing else writes in bulk, so a single
// transaction is the right trade (atomic: never half-erased).
import { sql, type Transaction } from 'kysely';
import type { Database } from '../db/schema.ts';
import { emailHmac } from './suppressions.ts';
import { ERASED_KINDS, type ErasedKind } from './schemas.ts';

/** What an anonymised message shows instead of its recipient. */
export const ERASED_ADDRESS = '(erased)';

export type EraseReport = Record<ErasedKind, number>;

const n = (r: { numAffectedRows?: bigint; numUpdatedOrDeletedRows?: bigint }) => Number(r.numAffectedRows ?? r.numUpdatedOrDeletedRows ?? 0);

/**
 * Erases `email` (normalised) in the team, in the caller's transaction. Works
 * whether or not a contact has the address (transactional recipients need
 * not be contacts). `secret` keys the suppression hash.
 */
export async function eraseAddress(tx: Transaction<Database>, teamId: string, email: string, secret: string): Promise<EraseReport> {
  const report = Object.fromEntries(ERASED_KINDS.map((k) => [k, 0])) as EraseReport;
  // The contact row first, locked: a concurrent upsert of the same address
  // waits for the erasure and then creates a new (suppressed) contact.
  const contacts = (
    await sql<{ id: string }>`SELECT id FROM contacts WHERE team_id = ${teamId}::uuid AND email = ${email} FOR UPDATE`.execute(tx)
  ).rows.map((r) => r.id);

  const messages = (
    await sql<{ id: string }>`
      SELECT id FROM email_send_log WHERE team_id = ${teamId}::uuid AND email = ${email} FOR UPDATE`.execute(tx)
  ).rows.map((r) => r.id);

  const events = (
    await sql<{ id: string }>`
      SELECT id FROM events
       WHERE team_id = ${teamId}::uuid
         AND (contact_id = ANY (${contacts}::uuid[]) OR (payload ? 'email' AND payload ->> 'email' = ${email}))
       FOR UPDATE`.execute(tx)
  ).rows.map((r) => r.id);

  report.tracking_hits = n(
    await sql`DELETE FROM tracking_hits
               WHERE team_id = ${teamId}::uuid
                 AND (email_send_log_id = ANY (${messages}::uuid[]) OR contact_id = ANY (${contacts}::uuid[]))`.execute(tx),
  );
  report.webhook_deliveries = n(
    await sql`DELETE FROM webhook_deliveries WHERE team_id = ${teamId}::uuid AND event_id = ANY (${events}::uuid[])`.execute(tx),
  );
  // Amounts and attribution stay for revenue counts; the person does not.
  // `source` is the client's text: cleared only where it quotes the address.
  for (const table of ['leads', 'sales'] as const) {
    report[table] = n(
      await sql`UPDATE ${sql.table(table)}
                   SET contact_id = NULL, event_id = NULL,
                       source = CASE WHEN strpos(lower(source), ${email}) > 0 THEN NULL ELSE source END
                 WHERE team_id = ${teamId}::uuid
                   AND (contact_id = ANY (${contacts}::uuid[]) OR event_id = ANY (${events}::uuid[]))`.execute(tx),
    );
  }
  report.campaign_decisions = n(
    await sql`DELETE FROM campaign_decisions WHERE team_id = ${teamId}::uuid AND contact_id = ANY (${contacts}::uuid[])`.execute(tx),
  );
  report.events = n(await sql`DELETE FROM events WHERE team_id = ${teamId}::uuid AND id = ANY (${events}::uuid[])`.execute(tx));

  // A message not yet handed to SMTP is cancelled; one being sent right now
  // ('sending') finishes, and its result lands on the anonymised row.
  report.messages = n(
    await sql`UPDATE email_send_log
                 SET email = ${ERASED_ADDRESS}, to_name = NULL, subject = NULL, render = NULL, smtp_response = NULL,
                     contact_id = NULL, open_tracking = false, click_tracking = false,
                     status = CASE WHEN status IN ('queued', 'deferred') THEN 'cancelled' ELSE status END,
                     last_error = CASE WHEN status IN ('queued', 'deferred') OR last_error IS NOT NULL THEN 'recipient erased' END,
                     updated_at = now()
               WHERE team_id = ${teamId}::uuid AND id = ANY (${messages}::uuid[])`.execute(tx),
  );

  // Idempotency records live 24 hours; the submit answer names the recipient.
  report.idempotency_records = n(
    await sql`DELETE FROM email_idempotency
               WHERE team_id = ${teamId}::uuid AND (response ->> 'to_email' = ${email} OR strpos(lower(key), ${email}) > 0)`.execute(tx),
  );
  report.imports = n(
    await sql`UPDATE contact_imports
                 SET error = replace(lower(error), ${email}, ${ERASED_ADDRESS}),
                     file_name = CASE WHEN strpos(lower(file_name), ${email}) > 0 THEN ${ERASED_ADDRESS} ELSE file_name END
               WHERE team_id = ${teamId}::uuid AND (strpos(lower(error), ${email}) > 0 OR strpos(lower(file_name), ${email}) > 0)`.execute(tx),
  );

  report.suppressions = n(await sql`DELETE FROM suppressions WHERE team_id = ${teamId}::uuid AND email = ${email}`.execute(tx));
  await sql`
    INSERT INTO suppressions (team_id, email_hmac, reason)
    VALUES (${teamId}::uuid, ${emailHmac(secret, email)}, 'erased')
    ON CONFLICT (team_id, email_hmac) WHERE email_hmac IS NOT NULL
    DO UPDATE SET reason = 'erased', updated_at = now()`.execute(tx);

  report.contacts = n(await sql`DELETE FROM contacts WHERE team_id = ${teamId}::uuid AND id = ANY (${contacts}::uuid[])`.execute(tx));
  return report;
}
