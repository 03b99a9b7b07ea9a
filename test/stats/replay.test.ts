// The statistics against a replay of a generated log: a seeded script of
// SMTP results (accepted, refused hard, deferred then accepted, deferred until
// a soft bounce, failed), bounce reports (soft, hard, soft then hard), delivery
// reports, complaints, replies, tracking hits of people and bots (repeats
// within the hour included) and unsubscribes from links, each driven through
// the code that records it (recordResults, applyFeedback, recordHit, the
// unsubscribe routes). The expected counts are computed from the script alone,
// per fact and time, and compared with the stats routes of two campaigns, the
// transactional mail and two mail accounts: totals, every hourly point, rates,
// before and after folding, with deltas arriving after a fold, and by day in a
// +05:30 time zone.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { recordResults, type Outcome, type SendResult } from '../../src/mail/send-record.ts';
import { applyFeedback, type Feedback } from '../../src/inbound/feedback.ts';
import { recordHit, type HitResult } from '../../src/mail/tracking.ts';
import { foldStats } from '../../src/stats/fold.ts';
import { ratesOf, zeroCounts, type Counts } from '../../src/stats/read.ts';
import { STATS_KEYS, type StatsKey } from '../../src/db/schema-stats.ts';
import { TrackingLinks } from '../../src/lib/tracking-links.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';

const HOUR = 3_600_000;
const config = testConfig();
const LIMITS = { maxHitsPerMessage: 1000 };
const HUMAN_UA = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36';

/** mulberry32: the same script on every run. */
function prng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Msg = { id: string; email: string; source: 'campaign' | 'transactional'; campaign: string | null; account: string };
type Fact = { msg: Msg; key: StatsKey; at: number; by: number };

describe('stats: replay of a generated log', () => {
  let t: TestApp;
  let teamId: string;
  let key: string;
  let otherKey: string;
  const accounts: string[] = [];
  const campaigns: string[] = [];
  const msgs: Msg[] = [];
  const facts: Fact[] = [];
  const links = new TrackingLinks(config.publicUrl!, config.appSecret!);
  let lateCampaign: string;

  const get = async (url: string, apiKey = key) => {
    const res = await t.app.inject({ method: 'GET', url: `/public/v1${url}`, headers: { 'x-api-key': apiKey } });
    return { status: res.statusCode, body: res.json() };
  };
  const dbNow = async () => (await sql<{ now: Date }>`SELECT now() AS now`.execute(t.database.db)).rows[0]!.now.getTime();

  before(async () => {
    t = await buildTestApp();
    ({ teamId, key } = await makeTeam(t.database.db));
    ({ key: otherKey } = await makeTeam(t.database.db, 'Other'));
    for (const name of ['x', 'y']) {
      const a = await t.database.db.insertInto('mail_accounts').values({
        team_id: teamId, host: '127.0.0.1', port: 2525, security: 'none', from_email: `${name}@plover.test`, daily_limit: 100_000, status: 'active',
      } as any).returning('id').executeTakeFirstOrThrow();
      accounts.push(a.id);
    }
    const tpl = await t.app.inject({
      method: 'POST', url: '/public/v1/email/templates', headers: { 'x-api-key': key },
      payload: { name: 'T', content_type: 'html', subject: 'Hi', content: '<p>Hi</p>' },
    });
    assert.equal(tpl.statusCode, 201, tpl.body);
    for (const name of ['A', 'B', 'Late']) {
      const c = await t.app.inject({
        method: 'POST', url: '/public/v1/email/campaigns', headers: { 'x-api-key': key },
        payload: { name, events: ['lead.created'], template_ids: [tpl.json().template.id], mail_account_ids: accounts },
      });
      assert.equal(c.statusCode, 201, c.body);
      campaigns.push(c.json().campaign.id);
    }
    lateCampaign = campaigns.pop()!;
  });
  after(() => t.close());

  async function insertMessages(n: number, rnd: () => number, prefix: string): Promise<Msg[]> {
    const out: Msg[] = [];
    for (let i = 0; i < n; i++) {
      const r = rnd();
      const campaign = r < 0.45 ? campaigns[0]! : r < 0.8 ? campaigns[1]! : null;
      out.push({ id: '', email: `${prefix}${i}@replay.example.com`, source: campaign ? 'campaign' : 'transactional', campaign, account: accounts[i % 2]! });
    }
    const { rows } = await sql<{ id: string; email: string }>`
      INSERT INTO email_send_log (team_id, campaign_id, mail_account_id, email, status, source, attempts, open_tracking, click_tracking,
                                  queued_at, created_at, updated_at)
      SELECT ${teamId}::uuid, x.campaign, x.account, x.email, 'sending', x.source, 1, true, true, now(), now(), now()
        FROM jsonb_to_recordset(${JSON.stringify(out)}::jsonb) AS x (campaign uuid, account uuid, email text, source text)
      RETURNING id, email`.execute(t.database.db);
    const byEmail = new Map(rows.map((r) => [r.email, r.id]));
    for (const m of out) m.id = byEmail.get(m.email)!;
    msgs.push(...out);
    return out;
  }

  const result = (m: Msg, outcome: Outcome, attempts: number): SendResult => ({
    row: { id: m.id, team_id: teamId, campaign_id: m.campaign, campaign_send_id: null, contact_id: null, email: m.email, attempts, source: m.source },
    outcome, messageId: `<${m.id}@plover.test>`, subject: 'Hi', accountId: m.account,
  });

  /** The SMTP phase: returns the messages the relay accepted. */
  async function smtpPhase(batch: Msg[], rnd: () => number): Promise<Msg[]> {
    const first: SendResult[] = [];
    const second: SendResult[] = [];
    const accepted: Msg[] = [];
    const retries = config.sendRetryDelays.length;
    const plan: [Msg, string][] = batch.map((m) => {
      const r = rnd();
      return [m, r < 0.6 ? 'sent' : r < 0.72 ? 'hard' : r < 0.84 ? 'deferred-sent' : r < 0.92 ? 'soft' : 'failed'];
    });
    for (const [m, p] of plan) {
      if (p === 'sent') first.push(result(m, { kind: 'sent', response: '250 2.0.0 OK queued as ABC' }, 1));
      if (p === 'hard') first.push(result(m, { kind: 'hard', response: '550 5.1.1 no such user' }, 1));
      if (p === 'failed') first.push(result(m, { kind: 'failed', response: 'template did not render' }, 1));
      if (p === 'deferred-sent') {
        first.push(result(m, { kind: 'temporary', response: '451 4.7.1 try later' }, 1));
        second.push(result(m, { kind: 'sent', response: '250 2.0.0 OK' }, 2));
      }
      // Deferred on its last attempt: a soft bounce.
      if (p === 'soft') first.push(result(m, { kind: 'temporary', response: '452 4.2.2 mailbox full' }, retries + 1));
    }
    const t1 = await dbNow();
    await recordResults(t.database.db, config, first);
    const t2 = await dbNow();
    await recordResults(t.database.db, config, second);
    const t3 = await dbNow();
    // A batch's time is its transaction's now(): between the reads around it.
    const check = (a: number, b: number) => assert.ok(Math.floor(a / (15 * 60_000)) === Math.floor(b / (15 * 60_000)), 'the test ran across a quarter hour; run it again');
    check(t1, t2);
    check(t2, t3);
    for (const [m, p] of plan) {
      if (p === 'failed') continue;
      if (p === 'deferred-sent') facts.push({ msg: m, key: 'deferred', at: t1, by: 1 });
      facts.push({ msg: m, key: 'sent', at: p === 'deferred-sent' ? t2 : t1, by: 1 });
      if (p === 'hard') facts.push({ msg: m, key: 'bounced_hard', at: t1, by: 1 });
      if (p === 'soft') facts.push({ msg: m, key: 'bounced_soft', at: t1, by: 1 });
      if (p === 'sent' || p === 'deferred-sent') accepted.push(m);
    }
    return accepted;
  }

  /** Bounce, delivery, complaint and reply reports, dated within the last two days, in rounds. */
  async function feedbackPhase(accepted: Msg[], rnd: () => number, now: number): Promise<void> {
    // The messages went out three days ago (reports dated before a message are taken as of its send).
    await sql`UPDATE email_send_log SET created_at = now() - interval '3 days', sent_at = now() - interval '3 days'
               WHERE id = ANY (${accepted.map((m) => m.id)}::uuid[])`.execute(t.database.db);
    const when = () => new Date(now - Math.floor(rnd() * 47 * HOUR) - 60_000);
    const status = new Map(accepted.map((m) => [m.id, 'sent']));
    const round = async (kind: Feedback['kind'], share: number, apply: (m: Msg, at: Date, i: number) => void, replies = 1) => {
      const items: Feedback[] = [];
      for (const m of accepted) {
        if (rnd() >= share) continue;
        for (let i = 0; i < replies; i++) {
          const at = when();
          items.push({ message_id: m.id, kind, at, reply: kind === 'reply' ? { from: m.email, subject: 'Re: Hi', text: 'thanks', message_id: `<r${i}.${m.id}@mx.example>`, in_reply_to: null } as any : undefined });
          apply(m, at, i);
        }
      }
      const r = await applyFeedback(t.database.db, items);
      assert.ok(r.outcomes.every((o) => o === 'applied'), JSON.stringify(r.outcomes));
    };
    await round('delivered', 0.3, (m, at) => {
      facts.push({ msg: m, key: 'delivered', at: at.getTime(), by: 1 });
      status.set(m.id, 'delivered');
    });
    await round('bounce_soft', 0.12, (m, at) => {
      facts.push({ msg: m, key: 'bounced_soft', at: at.getTime(), by: 1 });
      status.set(m.id, 'bounced_soft');
    });
    await round('bounce_hard', 0.12, (m, at) => {
      // A soft bounce that becomes hard moves to bounced_hard at the hard bounce's time.
      if (status.get(m.id) === 'bounced_soft') facts.push({ msg: m, key: 'bounced_soft', at: at.getTime(), by: -1 });
      facts.push({ msg: m, key: 'bounced_hard', at: at.getTime(), by: 1 });
      status.set(m.id, 'bounced_hard');
    });
    await round('complaint', 0.06, (m, at) => facts.push({ msg: m, key: 'complained', at: at.getTime(), by: 1 }));
    // Two replies to one message count once, at the first.
    const firstReply = new Map<string, { m: Msg; at: number }>();
    await round('reply', 0.1, (m, at) => {
      const prev = firstReply.get(m.id);
      if (!prev || at.getTime() < prev.at) firstReply.set(m.id, { m, at: at.getTime() });
    }, 2);
    for (const { m, at } of firstReply.values()) facts.push({ msg: m, key: 'replied', at, by: 1 });
  }

  /** Opens and clicks, people and bots, with repeats: a message counts once per verdict, at its first counted hit. */
  async function trackingPhase(accepted: Msg[], rnd: () => number): Promise<void> {
    const firstOf = new Map<string, number>();
    for (const m of accepted) {
      const hits: { kind: 'open' | 'click'; human: boolean; url: string | null }[] = [];
      if (rnd() < 0.4) for (let i = 0, n = 1 + Math.floor(rnd() * 3); i < n; i++) hits.push({ kind: 'open', human: true, url: null });
      if (rnd() < 0.2) hits.push({ kind: 'open', human: false, url: null });
      if (rnd() < 0.15) for (let i = 0, n = 1 + Math.floor(rnd() * 2); i < n; i++) hits.push({ kind: 'click', human: true, url: `https://example.com/${i}` });
      if (rnd() < 0.1) hits.push({ kind: 'click', human: false, url: 'https://example.com/0' });
      for (const h of hits) {
        const r: HitResult = await recordHit(t.database.db, {
          kind: h.kind, sendLogId: m.id, method: h.human ? 'GET' : 'HEAD', ip: '192.0.2.44', userAgent: h.human ? HUMAN_UA : null, url: h.url,
        }, LIMITS);
        assert.equal(r.status, 'recorded');
        if (r.status !== 'recorded' || !r.counted) continue;
        const keyOf = `${h.kind === 'open' ? 'opened' : 'clicked'}_${r.decision.is_bot ? 'bot' : 'human'}` as StatsKey;
        if (!firstOf.has(`${m.id}|${keyOf}`)) {
          firstOf.set(`${m.id}|${keyOf}`, 1);
          facts.push({ msg: m, key: keyOf, at: await dbNow(), by: 1 });
        }
      }
    }
  }

  function expected(filter: (m: Msg) => boolean, slot: (at: number) => number): { totals: Counts; points: Map<number, Counts> } {
    const totals = zeroCounts();
    const points = new Map<number, Counts>();
    for (const f of facts) {
      if (!filter(f.msg)) continue;
      totals[f.key] += f.by;
      const s = slot(f.at);
      const p = points.get(s) ?? zeroCounts();
      p[f.key] += f.by;
      points.set(s, p);
    }
    return { totals, points };
  }

  const scopes = () => [
    { name: 'campaign A', url: `/email/campaigns/${campaigns[0]}/stats`, filter: (m: Msg) => m.campaign === campaigns[0] },
    { name: 'campaign B', url: `/email/campaigns/${campaigns[1]}/stats`, filter: (m: Msg) => m.campaign === campaigns[1] },
    { name: 'transactional', url: '/email/emails/stats', filter: (m: Msg) => m.source === 'transactional' },
    { name: 'account x', url: `/email/mail-accounts/${accounts[0]}/stats`, filter: (m: Msg) => m.account === accounts[0] },
    { name: 'account y', url: `/email/mail-accounts/${accounts[1]}/stats`, filter: (m: Msg) => m.account === accounts[1] },
  ];

  async function compareAll(label: string, query: string, slot: (at: number) => number) {
    for (const s of scopes()) {
      const { status, body } = await get(`${s.url}?${query}`);
      assert.equal(status, 200, JSON.stringify(body));
      const want = expected(s.filter, slot);
      const stats = body.stats;
      assert.deepEqual(stats.totals, want.totals, `${label}, ${s.name}: totals`);
      assert.deepEqual(stats.rates, ratesOf(want.totals), `${label}, ${s.name}: rates`);
      const got = new Map<number, Counts>();
      const sum = zeroCounts();
      for (const p of stats.series) {
        const { at, ...counts } = p;
        for (const k of STATS_KEYS) sum[k] += counts[k];
        if (STATS_KEYS.some((k) => counts[k] !== 0)) got.set(Date.parse(at), counts);
      }
      assert.deepEqual(sum, stats.totals, `${label}, ${s.name}: the series sums to the totals`);
      const nonZero = new Map([...want.points].filter(([, c]) => STATS_KEYS.some((k) => c[k] !== 0)));
      assert.deepEqual(got, nonZero, `${label}, ${s.name}: points`);
    }
  }

  const deltas = async () => Number((await sql<{ n: string }>`SELECT count(*) AS n FROM stats_deltas`.execute(t.database.db)).rows[0]!.n);

  test('totals, hourly points and rates equal the script, before and after folding, also with deltas after a fold', async () => {
    const rnd = prng(20261125);
    const now = await dbNow();
    const batch = await insertMessages(400, rnd, 'r');
    const accepted = await smtpPhase(batch, rnd);
    await feedbackPhase(accepted, rnd, now);
    await trackingPhase(accepted, rnd);
    // Unsubscribes from a message's link (twice: the second counts nothing) and from a recipient link.
    const unsub = accepted.slice(0, 6);
    for (const [i, m] of unsub.entries()) {
      const url = i % 2 === 0 ? new URL(links.unsubscribeUrl(m.id)).pathname
        : new URL(links.recipientUnsubscribeUrl({ teamId, contactId: null, email: m.email })).pathname;
      for (let k = 0; k < 2; k++) {
        const res = await t.app.inject({ method: 'POST', url, payload: 'List-Unsubscribe=One-Click', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
        assert.equal(res.statusCode, 200, res.body);
      }
      facts.push({ msg: m, key: 'unsubscribed', at: await dbNow(), by: 1 });
    }

    // Every kind of fact is in the script (else a missing writer could pass unseen).
    const all = expected(() => true, () => 0).totals;
    for (const k of STATS_KEYS) assert.ok(all[k] > 0, `the script has ${k}`);

    const end = await dbNow();
    const range = `from=${new Date(now - 4 * 24 * HOUR).toISOString()}&to=${new Date(end + HOUR).toISOString()}`;
    const hourly = (at: number) => Math.floor(at / HOUR) * HOUR;
    assert.ok((await deltas()) > 0);
    await compareAll('unfolded', `${range}&interval=hour`, hourly);

    const folded = await foldStats(t.database.db);
    assert.ok(folded > 0);
    assert.equal(await deltas(), 0, 'a fold moves every delta');
    await compareAll('folded', `${range}&interval=hour`, hourly);

    // More facts after the fold: read from buckets and deltas together.
    const more = await insertMessages(60, rnd, 's');
    const accepted2 = await smtpPhase(more, rnd);
    await trackingPhase(accepted2, rnd);
    assert.ok((await deltas()) > 0);
    await compareAll('buckets + deltas', `${range}&interval=hour`, hourly);

    // Days in a +05:30 zone (no DST): a day starts at 18:30 UTC.
    const ist = 5.5 * HOUR;
    const daily = (at: number) => Math.floor((at + ist) / (24 * HOUR)) * 24 * HOUR - ist;
    await compareAll('days in Asia/Kolkata', `${range}&interval=day&tz=Asia/Kolkata`, daily);
    // A partial fold (the batch smaller than the deltas) leaves an exact answer too.
    await foldStats(t.database.db, 7);
    await compareAll('after a small-batch fold', `${range}&interval=hour`, hourly);
  });

  test('a late open: the send counts in its bucket a week ago, the open in the bucket of now', async () => {
    const [m] = await insertMessages(1, () => 0.99, 'late');
    // Its campaign: the dedicated one (insertMessages picked none for 0.99).
    await sql`UPDATE email_send_log SET campaign_id = ${lateCampaign}::uuid, source = 'campaign' WHERE id = ${m!.id}::uuid`.execute(t.database.db);
    await recordResults(t.database.db, config, [result({ ...m!, campaign: lateCampaign, source: 'campaign' }, { kind: 'sent', response: '250 OK' }, 1)]);
    // A week passes: the send and its counted delta move back seven days.
    await sql`UPDATE email_send_log SET sent_at = sent_at - interval '7 days', created_at = created_at - interval '7 days' WHERE id = ${m!.id}::uuid`.execute(t.database.db);
    await sql`UPDATE stats_deltas SET bucket = bucket - interval '7 days' WHERE campaign_id = ${lateCampaign}::uuid`.execute(t.database.db);
    await foldStats(t.database.db);
    const r = await recordHit(t.database.db, { kind: 'open', sendLogId: m!.id, method: 'GET', ip: '192.0.2.44', userAgent: HUMAN_UA, url: null }, LIMITS);
    assert.ok(r.status === 'recorded' && r.counted && !r.decision.is_bot, JSON.stringify(r));
    const now = await dbNow();
    const week = await get(`/email/campaigns/${lateCampaign}/stats?from=${new Date(now - 8 * 24 * HOUR).toISOString()}&to=${new Date(now).toISOString()}&interval=day`);
    assert.equal(week.status, 200);
    assert.equal(week.body.stats.totals.sent, 1);
    assert.equal(week.body.stats.totals.opened_human, 1);
    assert.equal(week.body.stats.rates.human_open, 100);
    const sentDay = week.body.stats.series.find((p: any) => p.sent === 1);
    const openDay = week.body.stats.series.find((p: any) => p.opened_human === 1);
    assert.equal(Date.parse(openDay.at) - Date.parse(sentDay.at), 7 * 24 * HOUR, 'seven days apart');
    // The last day alone: the open, no send (rates over zero sends are null, not an error).
    const day = await get(`/email/campaigns/${lateCampaign}/stats?from=${new Date(now - HOUR).toISOString()}&to=${new Date(now).toISOString()}&interval=hour`);
    assert.equal(day.body.stats.totals.sent, 0);
    assert.equal(day.body.stats.totals.opened_human, 1);
    assert.equal(day.body.stats.rates.delivery, null);
    assert.equal(day.body.stats.rates.human_open, null);
  });

  test('errors: unknown zone, reversed or too long range, bad interval; unknown, malformed and other-team ids are 404', async () => {
    const bad = async (url: string, field: string) => {
      const r = await get(url);
      assert.equal(r.status, 422, JSON.stringify(r.body));
      assert.equal(r.body.ok, false);
      assert.equal(r.body.error.code, 'VALIDATION_FAILED');
      assert.ok(r.body.error.details.some((d: any) => d.field === field), JSON.stringify(r.body));
    };
    await bad('/email/emails/stats?tz=Mars/Olympus', 'tz');
    await bad('/email/emails/stats?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z', 'from');
    await bad('/email/emails/stats?from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z&interval=hour', 'from');
    await bad('/email/emails/stats?interval=minute', 'interval');
    await bad('/email/emails/stats?from=yesterday', 'from');
    // Valid date-times new Date() cannot read (a leap second, an offset of hours alone) are read, not refused.
    for (const q of ['from=2016-12-31T23:59:60Z&to=2017-01-02T00:00:00Z', 'from=2026-01-01T00:00:00%2B01&to=2026-01-02T00:00:00%2B01']) {
      const r = await get(`/email/emails/stats?${q}`);
      assert.equal(r.status, 200, `${q}: ${JSON.stringify(r.body)}`);
    }
    assert.equal((await get('/email/campaigns/0190a6c8-0000-7000-8000-000000000001/stats')).status, 404);
    assert.equal((await get('/email/campaigns/nope/stats')).status, 404);
    assert.equal((await get(`/email/campaigns/${campaigns[0]}/stats`, otherKey)).status, 404);
    assert.equal((await get(`/email/mail-accounts/${accounts[0]}/stats`, otherKey)).status, 404);
    // Another team's transactional stats are its own (zeros here), never this team's.
    const other = await get('/email/emails/stats', otherKey);
    assert.equal(other.status, 200);
    assert.equal(other.body.stats.totals.sent, 0);
    // 30 days by day by default: 30 or 31 slots (the range widened to whole days).
    const def = await get('/email/emails/stats');
    assert.ok(def.body.stats.series.length >= 30 && def.body.stats.series.length <= 31, String(def.body.stats.series.length));
  });
});
