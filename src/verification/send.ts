// Verification on the send path (broadcast and automation lists). Two steps:
//  1. prefetchDomains, before the list's write transaction: the domains of a
//     batch not known fresh are looked up in DNS (VERIFY_CONCURRENCY at a time,
//     one lookup per domain however many addresses share it, lookups of one
//     domain in this process within a minute shared) and their verdicts
//     stored (mail_domain_checks: answers kept 24 h, DNS failures 1 h).
//  2. verifyForSend, inside it: per contact, the stored result when it is
//     recent enough (age_threshold days; 0: always verify), else a
//     verification from the stored domain verdicts while the send's budget
//     (max_budget; 0: none) lasts, reserved on the locked send row; results
//     stored on the contacts in one statement. No DNS in the transaction.
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import type { SkipReason } from '../db/schema-engine.ts';
import { checkDomain, syntaxProblem, verdictFor, type DomainVerdict, type MailDnsResolver, type VerificationStatus } from './check.ts';

type Tx = Transaction<Database>;

/** DNS lookups in flight per prefetch. */
export const VERIFY_CONCURRENCY = 8;
/** How long a domain's verdict is used: answers (valid, invalid), and DNS failures (unknown). */
export const DOMAIN_TTL_SECONDS = { answer: 24 * 3600, unknown: 3600 };

export type VerificationSettings = { active: boolean; acceptable_statuses: string[]; max_budget: number; age_threshold: number };

const domainOf = (email: string) => email.slice(email.lastIndexOf('@') + 1).toLowerCase();

/**
 * Lookups of this process in the last RECENT_MS, finished or not: two batches
 * that want one domain at about the same time share one lookup, also when the
 * second asks after the first's answer came but before it was stored.
 * Bounded: past RECENT_MAX entries the oldest half is dropped.
 */
const recent = new Map<string, { verdict: Promise<DomainVerdict>; at: number }>();
const RECENT_MS = 60_000;
const RECENT_MAX = 20_000;

/** Looks up the domains of `emails` not fresh in mail_domain_checks and stores their verdicts; returns the number looked up. */
export async function prefetchDomains(db: Db, resolver: MailDnsResolver, emails: string[]): Promise<number> {
  const domains = [...new Set(emails.filter((e) => syntaxProblem(e) === null).map(domainOf))];
  if (domains.length === 0) return 0;
  const { rows: fresh } = await sql<{ domain: string }>`
    SELECT domain FROM mail_domain_checks
     WHERE domain = ANY (${domains}::text[])
       AND checked_at > now() - make_interval(secs => CASE WHEN status = 'unknown' THEN ${DOMAIN_TTL_SECONDS.unknown}::int ELSE ${DOMAIN_TTL_SECONDS.answer}::int END)`.execute(db);
  const known = new Set(fresh.map((r) => r.domain));
  const todo = domains.filter((d) => !known.has(d));
  if (todo.length === 0) return 0;
  const results: { domain: string; status: string; reason: string }[] = [];
  let next = 0;
  const lookup = (domain: string) => {
    const now = Date.now();
    const hit = recent.get(domain);
    if (hit && now - hit.at < RECENT_MS) return hit.verdict;
    if (recent.size >= RECENT_MAX) for (const k of [...recent.keys()].slice(0, RECENT_MAX / 2)) recent.delete(k);
    const verdict = checkDomain(resolver, domain);
    recent.set(domain, { verdict, at: now });
    return verdict;
  };
  await Promise.all(Array.from({ length: Math.min(VERIFY_CONCURRENCY, todo.length) }, async () => {
    while (next < todo.length) {
      const domain = todo[next++]!;
      const v = await lookup(domain);
      results.push({ domain, status: v.status, reason: v.reason.slice(0, 200) });
    }
  }));
  await sql`
    INSERT INTO mail_domain_checks (domain, status, reason, checked_at)
    SELECT x.domain, x.status, x.reason, now() FROM jsonb_to_recordset(${JSON.stringify(results)}::jsonb) AS x (domain text, status text, reason text)
    ON CONFLICT (domain) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason, checked_at = EXCLUDED.checked_at`.execute(db);
  return todo.length;
}

type VerifiedContact = { id: string; email: string; validated_at?: unknown; validation_status?: unknown };

/**
 * The skip reason per contact (null: it may be sent to) under the send's
 * verification settings, inside the list's transaction (the send row locked
 * by the caller). An empty acceptable_statuses means `valid` only.
 */
export async function verifyForSend(
  trx: Tx, o: { teamId: string; sendId: string; contacts: VerifiedContact[]; settings: VerificationSettings },
): Promise<Map<string, SkipReason | null>> {
  const out = new Map<string, SkipReason | null>();
  if (!o.settings.active || o.contacts.length === 0) return out;
  const acceptable = new Set(o.settings.acceptable_statuses.length > 0 ? o.settings.acceptable_statuses : ['valid']);
  const judge = (status: VerificationStatus): SkipReason | null => (acceptable.has(status) ? null : (`verification_${status}` as SkipReason));
  const maxAge = o.settings.age_threshold * 86_400_000;
  const now = Date.now();
  const need: VerifiedContact[] = [];
  for (const c of o.contacts) {
    const at = c.validated_at instanceof Date ? c.validated_at.getTime() : null;
    const status = typeof c.validation_status === 'string' ? (c.validation_status as VerificationStatus) : null;
    if (o.settings.age_threshold > 0 && at !== null && status && now - at < maxAge) out.set(c.id, judge(status));
    else need.push(c);
  }
  if (need.length === 0) return out;
  let granted = need.length;
  if (o.settings.max_budget > 0) {
    const { rows } = await sql<{ granted: number }>`
      WITH cur AS (SELECT verifications_used FROM campaign_sends WHERE id = ${o.sendId}),
      upd AS (
        UPDATE campaign_sends s SET verifications_used = s.verifications_used + least(${need.length}::int, greatest(0, ${o.settings.max_budget}::int - cur.verifications_used))
          FROM cur WHERE s.id = ${o.sendId}
        RETURNING least(${need.length}::int, greatest(0, ${o.settings.max_budget}::int - cur.verifications_used)) AS granted
      )
      SELECT granted FROM upd`.execute(trx);
    granted = rows[0]?.granted ?? 0;
  }
  const checked = need.slice(0, granted);
  for (const c of need.slice(granted)) out.set(c.id, 'verification_budget');
  if (checked.length === 0) return out;
  const domains = [...new Set(checked.map((c) => domainOf(c.email)))];
  const { rows } = await sql<{ domain: string; status: DomainVerdict['status']; reason: string }>`
    SELECT domain, status, reason FROM mail_domain_checks WHERE domain = ANY (${domains}::text[])`.execute(trx);
  const verdicts = new Map(rows.map((r) => [r.domain, { status: r.status, reason: r.reason }]));
  const stored: { id: string; status: VerificationStatus; reason: string }[] = [];
  for (const c of checked) {
    const v = verdictFor(c.email, verdicts.get(domainOf(c.email)));
    out.set(c.id, judge(v.status));
    // A DNS failure is no verdict: the contact is verified again next time.
    if (v.status !== 'unknown') stored.push({ id: c.id, status: v.status, reason: v.reason.slice(0, 200) });
  }
  if (stored.length > 0) {
    await sql`
      UPDATE contacts k SET validation_status = x.status, is_email_valid = x.status IN ('valid', 'risky'), validation_method = 'mx',
             validation_reason = x.reason, validated_at = now()
        FROM jsonb_to_recordset(${JSON.stringify(stored)}::jsonb) AS x (id uuid, status text, reason text)
       WHERE k.id = x.id AND k.team_id = ${o.teamId}::uuid`.execute(trx);
  }
  return out;
}
