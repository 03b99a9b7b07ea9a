// The dashboard's suppression page through app.inject: add (validated whole,
// capped at 1,000), search and filter, remove what a team may remove, keep
// what the recipient did, CSRF, escaping and team isolation.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { emailHmac } from '../../src/contacts/suppressions.ts';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { signedIn } from './session.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
});
after(async () => t?.close());

async function entries(teamId: string) {
  const rows = await t.database.db.selectFrom('suppressions').select(['email', 'reason']).where('team_id', '=', teamId).orderBy('email').execute();
  return rows.map((r) => [r.email, r.reason]);
}

const api = (key: string, method: 'POST' | 'GET', url: string, payload?: object) =>
  t.app.inject({ method, url: `/public/v1${url}`, headers: { 'x-api-key': key }, ...(payload ? { payload } : {}) });

describe('suppressions page', () => {
  test('add addresses with a reason, see them, search by prefix and filter by reason; the nav links the page', async () => {
    const { teamId, session } = await signedIn(t.app, t.database.db);
    const empty = await session.get('/suppressions');
    assert.equal(empty.statusCode, 200);
    assert.match(empty.body, /No suppressed addresses/);
    assert.match(empty.body, /<a href="\/suppressions" aria-current="page">Suppressions<\/a>/);

    const added = await session.post('/suppressions', { emails: "Ann@Example.com, bob@example.com\no'neil@example.com", reason: 'manual' });
    assert.equal(added.statusCode, 303, added.body);
    assert.equal(added.headers.location, '/suppressions?done=added');
    await session.post('/suppressions', { emails: 'gone@example.com', reason: 'unsubscribed' });
    assert.deepEqual(await entries(teamId), [
      ['ann@example.com', 'manual'], ['bob@example.com', 'manual'], ['gone@example.com', 'unsubscribed'], ["o'neil@example.com", 'manual'],
    ]);

    const page = await session.get('/suppressions?done=added');
    assert.match(page.body, /The addresses are on the list/);
    assert.match(page.body, /o&#39;neil@example\.com/, 'escaped');
    assert.doesNotMatch(page.body, /o'neil@/);
    assert.match(page.body, /\(4 entries\)/);

    const search = await session.get('/suppressions?q=B');
    assert.match(search.body, /bob@example\.com/);
    assert.doesNotMatch(search.body, /ann@example\.com/);
    const byReason = await session.get('/suppressions?reason=unsubscribed');
    assert.match(byReason.body, /gone@example\.com/);
    assert.doesNotMatch(byReason.body, /bob@example\.com/);
    assert.match(byReason.body, /kept: the recipient’s own/, 'no Remove button for an unsubscribe');
    assert.doesNotMatch(byReason.body, /action="\/suppressions\/remove"/);
  });

  test('bad input is 422 and adds nothing: a non-address, more than 1,000, a reason of the system, nothing at all', async () => {
    const { teamId, session } = await signedIn(t.app, t.database.db);
    await session.get('/suppressions');
    const bad = await session.post('/suppressions', { emails: 'fine@example.com not-an-address', reason: 'manual' });
    assert.equal(bad.statusCode, 422);
    assert.match(bad.body, /Not e-mail addresses, nothing was added: not-an-address/);
    assert.match(bad.body, /fine@example\.com not-an-address<\/textarea>/, 'what was typed is kept');
    const many = Array.from({ length: 1001 }, (_, i) => `m${i}@e.co`).join('\n');
    const over = await session.post('/suppressions', { emails: many, reason: 'manual' });
    assert.equal(over.statusCode, 422);
    assert.match(over.body, /At most 1,000 addresses at once; you entered 1001/);
    assert.equal((await session.post('/suppressions', { emails: 'x@example.com', reason: 'erased' })).statusCode, 422);
    assert.equal((await session.post('/suppressions', { emails: '  ', reason: 'manual' })).statusCode, 422);
    assert.equal((await session.post('/suppressions', { emails: 'x@example.com', _csrf: 'forged' })).statusCode, 403);
    assert.deepEqual(await entries(teamId), []);
    const thousand = Array.from({ length: 1000 }, (_, i) => `k${i}@e.co`).join('\n');
    assert.equal((await session.post('/suppressions', { emails: thousand })).statusCode, 303);
    assert.equal((await entries(teamId)).length, 1000);
  });

  test('remove: a manual entry goes; an unsubscribe stays (409); manual over an unsubscribe falls back to it; erased entries show no address', async () => {
    const { teamId, key, session } = await signedIn(t.app, t.database.db);
    await session.get('/suppressions');
    await session.post('/suppressions', { emails: 'm@example.com' });
    const removed = await session.post('/suppressions/remove', { email: 'M@example.com' });
    assert.equal(removed.statusCode, 303);
    assert.equal(removed.headers.location, '/suppressions?done=removed');
    assert.deepEqual(await entries(teamId), []);
    assert.equal((await session.post('/suppressions/remove', { email: 'm@example.com' })).statusCode, 404);
    assert.equal((await session.post('/suppressions/remove', { email: 'junk' })).statusCode, 404);

    assert.equal((await api(key, 'POST', '/email/contacts/unsubscribe', { email: 'u@example.com' })).statusCode, 200);
    const kept = await session.post('/suppressions/remove', { email: 'u@example.com' });
    assert.equal(kept.statusCode, 409);
    assert.match(kept.body, /u@example\.com stays on the list/);
    await session.post('/suppressions', { emails: 'u@example.com' });
    const back = await session.post('/suppressions/remove', { email: 'u@example.com' });
    assert.equal(back.headers.location, '/suppressions?done=kept');
    assert.deepEqual(await entries(teamId), [['u@example.com', 'unsubscribed']]);

    await t.database.db.insertInto('suppressions')
      .values({ team_id: teamId, email: null, email_hmac: emailHmac(t.app.deps.config.appSecret!, 'x@example.com'), reason: 'erased' }).execute();
    const page = await session.get('/suppressions?reason=erased');
    assert.match(page.body, /<em>erased address<\/em>/);
  });

  test("another team's entries are neither shown nor removable", async () => {
    const a = await signedIn(t.app, t.database.db, 'Team A');
    const b = await signedIn(t.app, t.database.db, 'Team B');
    await a.session.get('/suppressions');
    await a.session.post('/suppressions', { emails: 'private-a@example.com' });
    const seen = await b.session.get('/suppressions?q=private');
    assert.doesNotMatch(seen.body, /private-a@example\.com/);
    const res = await b.session.post('/suppressions/remove', { email: 'private-a@example.com' });
    assert.equal(res.statusCode, 404);
    assert.deepEqual(await entries(a.teamId), [['private-a@example.com', 'manual']]);
  });

  test('junk queries and forms never give a 500', async () => {
    const { session } = await signedIn(t.app, t.database.db);
    for (const q of ['page=-1', 'page=1e99', 'page=abc', 'reason=nope', 'q=%00', `q=${'a'.repeat(5000)}`, 'q[]=1&q[]=2', 'done=<script>']) {
      const res = await session.get(`/suppressions?${q}`);
      assert.equal(res.statusCode, 200, q);
    }
    await session.get('/suppressions');
    const forms: Record<string, string>[] = [{ emails: 'a\u0000b@example.com' }, { email: '' }, { emails: 'x'.repeat(70_000) }];
    for (const form of forms) {
      const res = await session.post('/suppressions', form);
      assert.ok(res.statusCode < 500, `${JSON.stringify(form).slice(0, 60)}: ${res.statusCode}`);
      const rm = await session.post('/suppressions/remove', form);
      assert.ok(rm.statusCode < 500, `remove ${JSON.stringify(form).slice(0, 60)}: ${rm.statusCode}`);
    }
  });
});
