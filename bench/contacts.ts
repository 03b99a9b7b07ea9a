// `npm run bench -- contacts [--team-contacts <n>] [--subject-rows <n>]`:
// the contacts list on a large team and the erasure of a heavy contact.
//
// List: a team of N contacts (default 1,000,000; statuses, tags and creation
// times spread) next to another team of N/10. Each filter of
// GET /email/contacts (listContacts: the count and the page, as the route
// runs them) is timed, median of 5, with the indexes its page query uses.
//
// Erase: one contact with R messages, R events, R tracking hits and R webhook
// deliveries (default 100,000 each) in that team; eraseAddress() is timed in
// its one transaction (that duration is how long the subject's rows stay
// locked), and the report of what it removed is printed.
import { performance } from 'node:perf_hooks';
import { eraseAddress } from '../src/contacts/erase.ts';
import { contactListQueries, listContacts, type ContactFilter } from '../src/contacts/manage.ts';
import { createTeam } from '../src/teams/queries.ts';
import type { BenchOptions } from './lib/types.ts';

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function indexesOf(plan: unknown): string[] {
  const out = new Set<string>();
  const walk = (n: any) => {
    if (n['Index Name']) out.add(n['Index Name']);
    for (const c of n.Plans ?? []) walk(c);
  };
  walk((plan as any)[0].Plan);
  return [...out];
}

export async function run(opts: BenchOptions): Promise<void> {
  const n = opts.flags['team-contacts'] ?? 1_000_000;
  const r = opts.flags['subject-rows'] ?? 100_000;
  const pgs = await opts.postgres();
  const d = await pgs.createDatabase();
  opts.defer(() => d.drop());
  const team = await createTeam(d.db, 'big');
  const other = await createTeam(d.db, 'other');

  opts.log(`inserting ${n} contacts (+${n / 10} in another team)`);
  const fill = (teamId: string, count: number, prefix: string) => d.pool.query(
    `INSERT INTO contacts (team_id, email, status, tags, first_name, created_at)
     SELECT $1, $3 || g || '@d' || (g % 97) || '.example', (ARRAY['active','active','active','unsubscribed','bounced'])[1 + g % 5],
            CASE WHEN g % 10 = 0 THEN ARRAY['vip','news'] WHEN g % 3 = 0 THEN ARRAY['news'] ELSE '{}' END,
            'Name ' || g, now() - (g || ' seconds')::interval
       FROM generate_series(1, $2::int) g`, [teamId, count, prefix]);
  let t0 = performance.now();
  await fill(team.id, n, 'u');
  await fill(other.id, Math.floor(n / 10), 'o');
  await d.pool.query('VACUUM ANALYZE contacts');
  opts.log(`  ${Math.round(performance.now() - t0)} ms`);

  const filters: [string, Partial<ContactFilter>][] = [
    ['no filter, page 1', {}],
    ['no filter, page 500', { page: 500 }],
    ['status=bounced', { status: 'bounced' }],
    ['tag=vip', { tag: 'vip' }],
    ['search=u12345 (prefix)', { search: 'u12345' }],
    ['search=u1 (prefix of 1 in 9)', { search: 'u1' }],
    ['created in one hour', { createdAfter: new Date(Date.now() - 7_200_000), createdBefore: new Date(Date.now() - 3_600_000) }],
    ['tag=vip + status=active', { tag: 'vip', status: 'active' }],
  ];
  console.log(`contacts list, team of ${n} contacts (median of 5, count + page of 20)`);
  for (const [label, f] of filters) {
    const filter: ContactFilter = { page: 1, perPage: 20, ...f };
    const times: number[] = [];
    let total = 0;
    for (let i = 0; i < 5; i++) {
      t0 = performance.now();
      total = (await listContacts(d.db, team.id, filter)).total;
      times.push(performance.now() - t0);
    }
    // The page query's plan, built by the route's own code.
    const compiled = contactListQueries(d.db, team.id, filter).page(20, (filter.page - 1) * 20).compile();
    const plan = (await d.pool.query(`EXPLAIN (FORMAT JSON) ${compiled.sql}`, compiled.parameters as unknown[])).rows[0]['QUERY PLAN'];
    console.log(`  ${label.padEnd(32)} ${median(times).toFixed(1).padStart(8)} ms  total ${String(total).padStart(8)}  indexes: ${indexesOf(plan).join(', ') || 'none'}`);
  }

  opts.log(`a contact with ${r} messages, events, hits and deliveries`);
  const address = 'heavy.subject@bench.example';
  const { rows: [subject] } = await d.pool.query(`INSERT INTO contacts (team_id, email, first_name) VALUES ($1, $2, 'Heavy') RETURNING id`, [team.id, address]);
  const { rows: [hook] } = await d.pool.query(
    `INSERT INTO webhooks (team_id, url, events, secret_enc) VALUES ($1, 'https://hooks.example/x', '{email.sent}', '\\x00') RETURNING id`, [team.id]);
  t0 = performance.now();
  await d.pool.query(
    `INSERT INTO email_send_log (team_id, contact_id, email, subject, status, sent_at, to_name)
     SELECT $1, $2, $3, 'Hello Heavy', 'sent', now(), 'Heavy Subject' FROM generate_series(1, $4::int)`, [team.id, subject.id, address, r]);
  await d.pool.query(
    `INSERT INTO tracking_hits (team_id, email_send_log_id, contact_id, kind, method, ip, user_agent, is_bot, bot_score)
     SELECT team_id, id, contact_id, 'open', 'GET', '203.0.113.9', 'Mail', false, 0 FROM email_send_log WHERE contact_id = $1`, [subject.id]);
  await d.pool.query(
    `INSERT INTO events (team_id, name, contact_id, payload, processed_at)
     SELECT $1, 'email.sent', $2, jsonb_build_object('email', $3::text, 'email_send_log_id', gen_random_uuid()), now()
       FROM generate_series(1, $4::int)`, [team.id, subject.id, address, r]);
  await d.pool.query(
    `INSERT INTO webhook_deliveries (id, team_id, webhook_id, event_id, event, status, response_body)
     SELECT gen_random_uuid(), team_id, $2, id, name, 'success', '{"ok":true}' FROM events WHERE contact_id = $1`, [subject.id, hook.id]);
  // Other people's rows around it, as in a real team.
  await d.pool.query(
    `INSERT INTO events (team_id, name, contact_id, payload, processed_at)
     SELECT team_id, 'contact.saved', id, jsonb_build_object('email', email), now() FROM contacts WHERE team_id = $1 AND id <> $2`, [team.id, subject.id]);
  await d.pool.query('VACUUM ANALYZE');
  opts.log(`  ${Math.round(performance.now() - t0)} ms`);

  const times: number[] = [];
  let report: Record<string, number> = {};
  t0 = performance.now();
  report = await d.db.transaction().execute((tx) => eraseAddress(tx, team.id, address, pgs.appSecret));
  times.push(performance.now() - t0);
  console.log(`erase of a contact with ${r} messages, hits, events and deliveries (team of ${n} contacts, ${n} other events)`);
  console.log(`  one transaction: ${times[0]!.toFixed(0)} ms (the subject's rows are locked this long; nobody else's)`);
  console.log(`  removed: ${Object.entries(report).map(([k, v]) => `${k} ${v}`).join(', ')}`);
}
