// GET /email/contacts/{id}/timeline: every type from its source, order (newest
// first, oldest first, causal order within one instant), cursor pages that
// neither skip nor repeat, errors, another team's contact, and the plan: at
// 100,000 messages every source reads at most a page size + 1 of its index.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { TIMELINE_TYPES, timelineQuery } from '../../src/contacts/timeline.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { at, seedContactHistory } from './timeline-fixtures.ts';

type Item = { at: string; type: string; detail: Record<string, any> };

describe('contact timeline API', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  const get = (key: string, url: string) => t.app.inject({ method: 'GET', url: `/public/v1/email/contacts${url}`, headers: { 'x-api-key': key } });
  const all = async (key: string, id: string, q: string) => {
    const items: Item[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await get(key, `/${id}/timeline?${q}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      pages++;
      assert.equal(body.meta.current_page, String(pages));
      assert.ok(body.timeline.length <= body.meta.per_page);
      items.push(...body.timeline);
      cursor = body.meta.next_cursor;
      assert.ok(pages < 100, 'pages end');
    } while (cursor);
    return { items, pages };
  };

  test('every type appears, from its source, newest first; order=asc is the reverse; pages neither skip nor repeat', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const s = await seedContactHistory(t.app, t.database.db, teamId, key);

    const first = await get(key, `/${s.contactId}/timeline`);
    assert.equal(first.statusCode, 200, first.body);
    const body = first.json();
    assert.equal(body.ok, true);
    assert.equal(body.meta.per_page, 20);
    assert.equal(body.meta.order, 'desc');

    const { items } = await all(key, s.contactId, 'per_page=100');
    const types = new Set(items.map((i) => i.type));
    for (const type of TIMELINE_TYPES) assert.ok(types.has(type), `type ${type} appears: ${[...types].join(', ')}`);
    for (const type of types) assert.ok((TIMELINE_TYPES as readonly string[]).includes(type), `${type} is a documented type`);
    const times = items.map((i) => i.at);
    assert.deepEqual([...times].sort().reverse(), times, 'newest first');

    // Details carry what each source knows.
    const decision = items.find((i) => i.type === 'decision' && i.detail.decision === 'skip')!;
    assert.deepEqual(
      { reason: decision.detail.reason, campaign: decision.detail.campaign_name, at: decision.at, event: decision.detail.event_id },
      { reason: 'cooldown', campaign: 'Welcome series', at: at(1), event: s.skipEventId },
    );
    const opens = items.filter((i) => i.type === 'opened');
    assert.equal(opens.length, 1, 'an open is its hit, not also its event row');
    assert.deepEqual(
      { verdict: opens[0]!.detail.verdict, signals: opens[0]!.detail.signals, score: opens[0]!.detail.bot_score, counted: opens[0]!.detail.counted },
      { verdict: 'bot', signals: ['apple_mpp_proxy', 'prefetch_timing'], score: 0.9, counted: true },
    );
    const click = items.find((i) => i.type === 'clicked')!;
    assert.deepEqual([click.detail.verdict, click.detail.url], ['human', 'https://example.com/offer']);
    assert.equal(items.find((i) => i.type === 'message_bounced')!.detail.bounce_type, 'soft');
    assert.equal(items.find((i) => i.type === 'message_failed')!.detail.reason, 'template render failed');
    assert.equal(items.find((i) => i.type === 'message_queued' && i.detail.email_send_log_id === s.messages.sent)!.detail.status, 'delivered');
    assert.equal(items.find((i) => i.type === 'suppressed')!.detail.reason, 'unsubscribed');
    assert.equal(items.find((i) => i.type === 'unsubscribed')!.detail.method, 'api');
    assert.equal(items.find((i) => i.type === 'event')!.detail.name, 'lead.created');
    const hooks = items.filter((i) => i.type === 'webhook');
    assert.deepEqual(new Set(hooks.map((h) => h.detail.event)), new Set(['email.contact.saved', 'email.sent', 'email.lead.created']));
    assert.ok(hooks.every((h) => h.detail.status === 'pending' && typeof h.detail.delivery_id === 'string'));

    // Oldest first is the exact reverse; within one instant the decision precedes the message it queued.
    const asc = await all(key, s.contactId, 'order=asc&per_page=100');
    assert.deepEqual(asc.items, [...items].reverse());
    const atTwo = asc.items.filter((i) => i.at === at(2)).map((i) => i.type);
    assert.deepEqual(atTwo, ['contact_saved', 'decision', 'message_queued']);

    // Small pages, both orders: the same items, none twice, none skipped.
    for (const order of ['desc', 'asc']) {
      const paged = await all(key, s.contactId, `order=${order}&per_page=3`);
      assert.equal(paged.pages, Math.ceil(items.length / 3));
      assert.deepEqual(paged.items, order === 'desc' ? items : [...items].reverse(), `per_page=3 ${order}`);
    }
  });

  test('items in UTC year 0 (1 BC) and 10000 page like any other: in order, none skipped or repeated', async () => {
    const { key } = await makeTeam(t.database.db, 'years');
    const ev = (occurred_at: string) => t.app.inject({
      method: 'POST', url: '/public/v1/email/events', headers: { 'x-api-key': key },
      payload: { event_name: 'contact.saved', email: 'years@example.com', occurred_at },
    });
    const times = ['0001-01-01T00:00:00.123456+15:59', '0001-01-01T00:00:00+15:59', '2030-05-06T07:08:09Z', '9999-12-31T23:59:59.5-15:59', '9999-12-31T23:59:59-15:59'];
    for (const at of times) assert.equal((await ev(at)).statusCode, 202);
    const id = (await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/upsert', headers: { 'x-api-key': key }, payload: { email: 'years@example.com' } })).json().contact.id;
    const expected = times.map((x) => new Date(x).toISOString()).sort((a, b) => Date.parse(a) - Date.parse(b));
    for (const order of ['asc', 'desc'] as const) {
      const { items, pages } = await all(key, id, `per_page=1&order=${order}`);
      // The contact's own saves (the upsert above, and the one that made it) are among them, at today's time.
      const years = items.filter((i) => expected.includes(i.at)).map((i) => i.at);
      assert.deepEqual(years, order === 'asc' ? expected : [...expected].reverse(), `${order}: ${items.map((i) => i.at).join(', ')}`);
      assert.equal(new Set(items.map((i) => `${i.at} ${i.type} ${i.detail.event_id ?? ''}`)).size, items.length, 'no item twice');
      assert.equal(pages, items.length);
    }
  });

  test('errors: bad per_page, order or cursor are 422; an unknown or malformed id, or another team\'s contact, is 404', async () => {
    const { key, teamId } = await makeTeam(t.database.db, 'errors');
    const other = await makeTeam(t.database.db, 'other');
    const s = await seedContactHistory(t.app, t.database.db, teamId, key, 'err@example.com');
    for (const q of ['per_page=0', 'per_page=101', 'per_page=x', 'order=up', 'cursor=', 'cursor=abc', `cursor=${Buffer.from('["x",1,"y",1]').toString('base64url')}`,
      `cursor=${Buffer.from(JSON.stringify(['2026-03-01T10:00:00.000000Z', 99, '00000000-0000-0000-0000-000000000000', 1])).toString('base64url')}`,
      // Times PostgreSQL would refuse (a 500 if they reached it): no 31 February, no year 0 (it is 1 BC), no 4714 BC.
      ...['2026-02-31 00:00:00.000000+00 AD', '0000-01-01 00:00:00.000000+00 AD', '4714-01-01 00:00:00.000000+00 BC', '2026-01-01 24:00:00.000000+00 AD',
        '2026-02-31T00:00:00.000000Z', '2025-02-29T00:00:00.000000Z', '0000-01-01T00:00:00.000000Z']
        .map((at) => `cursor=${Buffer.from(JSON.stringify([at, 1, '00000000-0000-0000-0000-000000000000', 2])).toString('base64url')}`)]) {
      const res = await get(key, `/${s.contactId}/timeline?${q}`);
      assert.equal(res.statusCode, 422, `${q}: ${res.body}`);
      assert.equal(res.json().error.code, 'VALIDATION_FAILED');
    }
    for (const [k, id] of [[other.key, s.contactId], [key, '00000000-0000-4000-8000-000000000000'], [key, 'not-a-uuid']] as const) {
      const res = await get(k, `/${id}/timeline`);
      assert.equal(res.statusCode, 404, res.body);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
    // The other team's own contact with the same address sees none of this team's history.
    const theirs = await t.app.inject({ method: 'POST', url: '/public/v1/email/contacts/upsert', headers: { 'x-api-key': other.key }, payload: { email: 'err@example.com' } });
    const items = (await get(other.key, `/${theirs.json().contact.id}/timeline?per_page=100`)).json().timeline as Item[];
    assert.deepEqual(items.map((i) => i.type), ['contact_saved']);
    assert.equal((await get('nope', `/${s.contactId}/timeline`)).statusCode, 401);
  });

  test('a contact with 100,000 messages: each source reads at most a page + 1 of its own index, first page and deep pages alike', async () => {
    const { key, teamId } = await makeTeam(t.database.db, 'big');
    const contactId: string = (await t.app.inject({
      method: 'POST', url: '/public/v1/email/contacts/upsert', headers: { 'x-api-key': key }, payload: { email: 'big@example.com' },
    })).json().contact.id;
    const db = t.database.db;
    const N = 100_000;
    // Messages a minute apart, each with its sent event and an open hit (other contacts' rows alongside).
    await sql`INSERT INTO email_send_log (team_id, contact_id, email, status, created_at, updated_at)
              SELECT ${teamId}, ${contactId}, 'big@example.com', 'sent', ts, ts
                FROM generate_series(1, ${N}) g, LATERAL (SELECT '2025-01-01'::timestamptz + g * interval '1 minute' AS ts) x`.execute(db);
    await sql`INSERT INTO events (team_id, name, contact_id, payload, occurred_at, created_at)
              SELECT team_id, 'email.sent', contact_id, jsonb_build_object('email_send_log_id', id), created_at + interval '1 second', created_at
                FROM email_send_log WHERE contact_id = ${contactId}`.execute(db);
    await sql`INSERT INTO tracking_hits (team_id, email_send_log_id, contact_id, kind, method, is_bot, bot_score, created_at)
              SELECT team_id, id, contact_id, 'open', 'GET', false, 0, created_at + interval '2 seconds'
                FROM email_send_log WHERE contact_id = ${contactId}`.execute(db);
    // Another contact's messages and events interleaved in time: an index that is not the contact's would read and drop them.
    const otherId: string = (await t.app.inject({
      method: 'POST', url: '/public/v1/email/contacts/upsert', headers: { 'x-api-key': key }, payload: { email: 'other@example.com' },
    })).json().contact.id;
    await sql`INSERT INTO email_send_log (team_id, contact_id, email, status, created_at, updated_at)
              SELECT ${teamId}, ${otherId}, 'other@example.com', 'sent', ts, ts
                FROM generate_series(1, ${N / 5}) g, LATERAL (SELECT '2025-01-01'::timestamptz + g * interval '5 minutes' + interval '30 seconds' AS ts) x`.execute(db);
    await sql`INSERT INTO events (team_id, name, contact_id, payload, occurred_at, created_at)
              SELECT team_id, 'email.sent', contact_id, '{}', created_at, created_at FROM email_send_log WHERE contact_id = ${otherId}`.execute(db);
    await sql`ANALYZE email_send_log; ANALYZE events; ANALYZE tracking_hits`.execute(db);

    const perPage = 50;
    // A deep cursor: the middle of the history.
    const mid = await get(key, `/${contactId}/timeline?per_page=${perPage}`);
    let cursor = mid.json().meta.next_cursor as string;
    for (let i = 0; i < 3; i++) cursor = (await get(key, `/${contactId}/timeline?per_page=${perPage}&cursor=${cursor}`)).json().meta.next_cursor;
    const { decodeCursor } = await import('../../src/contacts/timeline.ts');
    const deep = { ...decodeCursor(cursor), at: '2025-03-10T00:00:00.500000Z' };

    for (const [label, opts] of [
      ['first page, newest first', { perPage, order: 'desc' as const }],
      ['first page, oldest first', { perPage, order: 'asc' as const }],
      ['deep page, newest first', { perPage, order: 'desc' as const, cursor: deep }],
      ['deep page, oldest first', { perPage, order: 'asc' as const, cursor: deep }],
    ] as const) {
      const q = timelineQuery(teamId, { id: contactId, email: 'big@example.com' }, opts).compile(db);
      const { rows } = await t.database.pool.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${q.sql}`, [...q.parameters]);
      const plan = rows[0]['QUERY PLAN'][0];
      const scans: { type: string; index?: string; rows: number; relation?: string }[] = [];
      const walk = (n: any) => {
        if (/Scan/.test(n['Node Type'])) scans.push({ type: n['Node Type'], index: n['Index Name'], rows: (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0)) * (n['Actual Loops'] ?? 1), relation: n['Relation Name'] });
        for (const c of n.Plans ?? []) walk(c);
      };
      walk(plan.Plan);
      for (const s of scans.filter((x) => ['email_send_log', 'events', 'tracking_hits'].includes(x.relation ?? ''))) {
        assert.notEqual(s.type, 'Seq Scan', `${label}: ${JSON.stringify(s)}`);
        // Rows returned plus rows read and dropped by a filter: what the scan touched.
        assert.ok(s.rows <= perPage + 1, `${label}: a source read ${s.rows} rows: ${JSON.stringify(scans)}`);
      }
      console.log(`# timeline at ${N} messages, ${label}: ${plan['Execution Time']} ms (planning ${plan['Planning Time']} ms)`);
    }
    // And through the API, timed: a page answers fast.
    const started = performance.now();
    const res = await get(key, `/${contactId}/timeline?per_page=100&cursor=${cursor}`);
    const ms = performance.now() - started;
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().timeline.length, 100);
    console.log(`# timeline API page of 100 at ${N} messages: ${ms.toFixed(1)} ms`);
  });
});
