// The suppression list API (/email/suppressions): add one or up to 1,000,
// validated whole; list with filters and pages; remove what a team may
// remove, never what the recipient did; contacts.status mirrors the list;
// another team's entries are invisible (404).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { emailHmac, suppress } from '../../src/contacts/suppressions.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

type Inject = { statusCode: number; json(): any; body: string };

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(async () => t?.close());

function client(key: string) {
  const headers = { 'x-api-key': key };
  const call = (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown): Promise<Inject> =>
    t.app.inject({ method, url: `/public/v1${url}`, headers, ...(payload === undefined ? {} : { payload: payload as object }) });
  return {
    get: (url: string) => call('GET', url),
    post: (url: string, payload: unknown) => call('POST', url, payload),
    del: (url: string) => call('DELETE', url),
  };
}

async function team() {
  const { teamId, key } = await makeTeam(t.database.db);
  return { teamId, c: client(key) };
}

async function rows(teamId: string) {
  return t.database.db.selectFrom('suppressions').selectAll().where('team_id', '=', teamId).orderBy('email').execute();
}

async function contactStatus(teamId: string, email: string) {
  const row = await t.database.db.selectFrom('contacts').select('status').where('team_id', '=', teamId).where('email', '=', email).executeTakeFirst();
  return row?.status;
}

const secret = () => t.app.deps.config.appSecret!;
const del = (email: string) => `/email/suppressions/${encodeURIComponent(email)}`;

describe('adding', () => {
  test('one address: manual by default, trimmed and lower-cased, listed; an active contact keeps its status', async () => {
    const { teamId, c } = await team();
    await c.post('/email/contacts/upsert', { email: 'ada@example.com' });
    const res = await c.post('/email/suppressions', { email: '  Ada@Example.COM ' });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.deepEqual(body.summary, { received: 1, added: 1, updated: 0, unchanged: 0, contacts_changed: 0 });
    assert.equal(body.suppressions.length, 1);
    const entry = body.suppressions[0];
    assert.equal(entry.email, 'ada@example.com');
    assert.equal(entry.reason, 'manual');
    assert.deepEqual(entry.reasons, ['manual']);
    assert.equal(entry.message_id, null);
    assert.match(entry.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(await contactStatus(teamId, 'ada@example.com'), 'active', 'a manual entry leaves the status; the list stops the mail');

    const again = await c.post('/email/suppressions', { email: 'ada@example.com' });
    assert.deepEqual(again.json().summary, { received: 1, added: 0, updated: 0, unchanged: 1, contacts_changed: 0 });
    const list = await c.get('/email/suppressions');
    assert.equal(list.statusCode, 200, list.body);
    assert.deepEqual(list.json().suppressions.map((s: any) => [s.email, s.reason]), [['ada@example.com', 'manual']]);
  });

  test('bulk with reasons: active contacts take the mirrored status; a stronger reason replaces a weaker one and both are remembered', async () => {
    const { teamId, c } = await team();
    for (const email of ['u@example.com', 'b@example.com', 'k@example.com', 'm@example.com', 'gone@example.com']) {
      assert.equal((await c.post('/email/contacts/upsert', { email })).statusCode, 200);
    }
    await c.post('/email/contacts/unsubscribe', { email: 'gone@example.com' });
    const res = await c.post('/email/suppressions', {
      reason: 'unsubscribed',
      suppressions: [
        { email: 'u@example.com' },
        { email: 'b@example.com', reason: 'bounced_hard' },
        { email: 'k@example.com', reason: 'complained' },
        { email: 'm@example.com', reason: 'manual' },
        { email: 'gone@example.com', reason: 'manual' },
        { email: 'new@example.com', reason: 'bounced_hard' },
        { email: 'U@example.com', reason: 'manual' },
      ],
    });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.deepEqual(body.summary, { received: 7, added: 5, updated: 1, unchanged: 0, contacts_changed: 3 });
    assert.deepEqual(
      body.suppressions.map((s: any) => [s.email, s.reason, s.reasons]),
      [
        ['u@example.com', 'manual', ['manual', 'unsubscribed']],
        ['b@example.com', 'bounced_hard', ['bounced_hard']],
        ['k@example.com', 'complained', ['complained']],
        ['m@example.com', 'manual', ['manual']],
        ['gone@example.com', 'manual', ['manual', 'unsubscribed']],
        ['new@example.com', 'bounced_hard', ['bounced_hard']],
      ],
      'one entry per address, in the order first given',
    );
    // manual is in force for u@, and the unsubscribe given with it is mirrored by the contact.
    assert.equal(await contactStatus(teamId, 'u@example.com'), 'unsubscribed');
    assert.equal(await contactStatus(teamId, 'b@example.com'), 'bounced');
    assert.equal(await contactStatus(teamId, 'k@example.com'), 'complained');
    assert.equal(await contactStatus(teamId, 'm@example.com'), 'active');
    assert.equal(await contactStatus(teamId, 'gone@example.com'), 'unsubscribed');
    assert.equal(await contactStatus(teamId, 'new@example.com'), undefined, 'no contact is created');

    const up = await c.post('/email/suppressions', { email: 'b@example.com', reason: 'unsubscribed' });
    assert.deepEqual(up.json().summary, { received: 1, added: 0, updated: 1, unchanged: 0, contacts_changed: 0 });
    assert.deepEqual([up.json().suppressions[0].reason, up.json().suppressions[0].reasons], ['bounced_hard', ['bounced_hard', 'unsubscribed']]);
    assert.equal(await contactStatus(teamId, 'b@example.com'), 'bounced', 'only an active contact changes');
  });

  test('1,000 entries in one request; 1,001 is 422 and writes nothing', async () => {
    const { teamId, c } = await team();
    const entries = (n: number, tag: string) => Array.from({ length: n }, (_, i) => ({ email: `${tag}${i}@example.com` }));
    const ok = await c.post('/email/suppressions', { suppressions: entries(1000, 'k') });
    assert.equal(ok.statusCode, 200, ok.body.slice(0, 500));
    assert.equal(ok.json().summary.added, 1000);
    assert.equal(ok.json().suppressions.length, 1000);
    assert.equal((await rows(teamId)).length, 1000);

    const over = await c.post('/email/suppressions', { suppressions: entries(1001, 'x') });
    assert.equal(over.statusCode, 422, over.body.slice(0, 500));
    assert.equal(over.json().error.code, 'VALIDATION_FAILED');
    assert.deepEqual(over.json().error.details.map((d: any) => d.field), ['suppressions']);
    assert.equal((await rows(teamId)).length, 1000, 'nothing of the refused request is written');
  });

  test('validated whole: every bad entry is listed and nothing is written; reasons of the system are refused', async () => {
    const { teamId, c } = await team();
    const bad = await c.post('/email/suppressions', {
      suppressions: [
        { email: 'fine@example.com' },
        { email: 'not an address' },
        { email: 'ok@example.com', reason: 'erased' },
        { email: 'ok2@example.com', reason: 'soft_bounce' },
        { email: 'ok3@example.com', extra: 1 },
      ],
    });
    assert.equal(bad.statusCode, 422, bad.body);
    assert.deepEqual(
      bad.json().error.details.map((d: any) => d.field).sort(),
      ['suppressions[1].email', 'suppressions[2].reason', 'suppressions[3].reason', 'suppressions[4].extra'],
    );
    for (const body of [{}, { email: 'a@example.com', suppressions: [{ email: 'b@example.com' }] }, { suppressions: [] }, { email: 'a@example.com', reason: 'nope' }]) {
      const res = await c.post('/email/suppressions', body);
      assert.equal(res.statusCode, 422, `${JSON.stringify(body)}: ${res.body}`);
      assert.equal(res.json().ok, false);
      assert.ok(res.json().error.details.length > 0);
    }
    const junk = await t.app.inject({
      method: 'POST', url: '/public/v1/email/suppressions', headers: { 'x-api-key': (await makeTeam(t.database.db)).key, 'content-type': 'application/json' }, payload: '{"email":',
    });
    assert.equal(junk.statusCode, 422);
    assert.equal((await rows(teamId)).length, 0);
  });
});

describe('listing', () => {
  test('pages of 20 by default, newest first, meta as strings; out-of-range paging is 422', async () => {
    const { teamId, c } = await team();
    // Distinct creation times, oldest first: e00 … e44.
    await sql`
      INSERT INTO suppressions (team_id, email, reason, reasons, created_at)
      SELECT ${teamId}, 'e' || lpad(i::text, 2, '0') || '@example.com', 'manual', '{manual}', now() - make_interval(mins => 100 - i)
        FROM generate_series(0, 44) AS i`.execute(t.database.db);
    const seen: string[] = [];
    for (const page of [1, 2, 3]) {
      const res = await c.get(`/email/suppressions?page=${page}`);
      assert.equal(res.statusCode, 200, res.body);
      const b = res.json();
      assert.deepEqual(b.meta, { current_page: String(page), per_page: 20, total: '45', last_page: '3' });
      seen.push(...b.suppressions.map((s: any) => s.email));
    }
    assert.deepEqual(seen, Array.from({ length: 45 }, (_, i) => `e${String(44 - i).padStart(2, '0')}@example.com`));
    const past = await c.get('/email/suppressions?page=4&per_page=20');
    assert.deepEqual(past.json().suppressions, []);
    const small = await c.get('/email/suppressions?per_page=7&page=2');
    assert.deepEqual(small.json().suppressions.map((s: any) => s.email), seen.slice(7, 14));
    for (const q of ['page=0', 'per_page=0', 'per_page=101', 'page=x', 'reason=hard_bounce', `search=${'a'.repeat(321)}`, 'created_from=yesterday']) {
      const res = await c.get(`/email/suppressions?${q}`);
      assert.equal(res.statusCode, 422, `${q}: ${res.body}`);
    }
  });

  test('filters: reason, e-mail prefix (case-insensitive, literal), created range; erased entries show without an address', async () => {
    const { teamId, c } = await team();
    const db = t.database.db;
    await suppress(db, [
      { team_id: teamId, email: 'alpha@example.com', reason: 'manual' },
      { team_id: teamId, email: 'al_x@example.com', reason: 'bounced_hard' },
      { team_id: teamId, email: 'alfa@example.com', reason: 'unsubscribed' },
      { team_id: teamId, email: 'beta@example.com', reason: 'soft_bounce' },
    ]);
    await db.insertInto('suppressions').values({ team_id: teamId, email: null, email_hmac: emailHmac(secret(), 'forgotten@example.com'), reason: 'erased' }).execute();
    await sql`UPDATE suppressions SET created_at = '2026-01-10T00:00:00Z' WHERE team_id = ${teamId} AND email = 'beta@example.com'`.execute(db);

    const get = async (q: string) => {
      const res = await c.get(`/email/suppressions?${q}`);
      assert.equal(res.statusCode, 200, `${q}: ${res.body}`);
      return res.json().suppressions.map((s: any) => s.email).sort();
    };
    assert.deepEqual(await get('search=AL'), ['al_x@example.com', 'alfa@example.com', 'alpha@example.com']);
    assert.deepEqual(await get('search=al_'), ['al_x@example.com'], '_ is literal, not a wildcard');
    assert.deepEqual(await get('search=lpha'), [], 'a prefix, not a substring');
    assert.deepEqual(await get('reason=unsubscribed'), ['alfa@example.com']);
    assert.deepEqual(await get('reason=erased'), [null]);
    assert.deepEqual(await get('reason=erased&search=forgotten'), [], 'no search finds an erased address');
    assert.deepEqual(await get('created_to=2026-01-11T00:00:00Z'), ['beta@example.com']);
    assert.deepEqual(await get('created_from=2026-01-10T00:00:00Z&created_to=2026-01-10T00:00:00.001Z'), ['beta@example.com'], 'from inclusive');
    assert.deepEqual(await get('created_from=2026-01-10T00:00:00.001Z&reason=soft_bounce'), []);
    assert.equal((await get('')).length, 5);
    const erased = (await c.get('/email/suppressions?reason=erased')).json().suppressions[0];
    assert.deepEqual([erased.email, erased.reason, erased.reasons], [null, 'erased', ['erased']]);
    assert.ok(!JSON.stringify(erased).includes(emailHmac(secret(), 'forgotten@example.com')), 'the hash is not shown');
    const backwards = await c.get('/email/suppressions?created_from=2026-01-11T00:00:00Z&created_to=2026-01-10T00:00:00Z');
    assert.equal(backwards.statusCode, 422);
    assert.deepEqual(backwards.json().error.details, [{ field: 'created_to', message: 'must be after created_from' }]);
  });
});

describe('removing', () => {
  test('a manual entry goes; then 404; an address that is not an address is 404 too', async () => {
    const { teamId, c } = await team();
    await c.post('/email/suppressions', { email: 'm+tag@example.com' });
    const res = await c.del(del('M+Tag@Example.com'));
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, removed: ['manual'], suppression: null });
    assert.equal((await rows(teamId)).length, 0);
    const again = await c.del(del('m+tag@example.com'));
    assert.equal(again.statusCode, 404);
    assert.equal(again.json().error.code, 'NOT_FOUND');
    assert.equal((await c.del('/email/suppressions/nonsense')).statusCode, 404);
    // Past the router's 200-character path parameter: refused in the envelope, never a 500 (the dashboard form has no such limit).
    const long = `${'l'.repeat(64)}@${['a'.repeat(60), 'b'.repeat(60), 'c'.repeat(60)].join('.')}.example.com`;
    await c.post('/email/suppressions', { email: long });
    const tooLong = await c.del(del(long));
    assert.ok(tooLong.statusCode >= 400 && tooLong.statusCode < 500, `${tooLong.statusCode} ${tooLong.body}`);
    assert.equal(tooLong.json().ok, false);
    assert.equal((await c.del(`/email/suppressions/${'%00'}`)).statusCode, 404);
  });

  test('a hard bounce goes and its contact is active again; a bounce on top of an unsubscribe falls back to it', async () => {
    const { teamId, c } = await team();
    await c.post('/email/contacts/upsert', { email: 'fixed@example.com' });
    await c.post('/email/suppressions', { email: 'fixed@example.com', reason: 'bounced_hard' });
    assert.equal(await contactStatus(teamId, 'fixed@example.com'), 'bounced');
    const res = await c.del(del('fixed@example.com'));
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().removed, ['bounced_hard']);
    assert.equal(await contactStatus(teamId, 'fixed@example.com'), 'active');

    // Unsubscribed, then hard-bounced (the bounce is in force, the contact stays unsubscribed).
    await c.post('/email/contacts/unsubscribe', { email: 'both@example.com' });
    await suppress(t.database.db, [{ team_id: teamId, email: 'both@example.com', reason: 'bounced_hard' }]);
    const both = await c.del(del('both@example.com'));
    assert.equal(both.statusCode, 200, both.body);
    assert.deepEqual(both.json().removed, ['bounced_hard']);
    assert.equal(both.json().suppression.reason, 'unsubscribed');
    assert.deepEqual(both.json().suppression.reasons, ['unsubscribed']);
    assert.equal(await contactStatus(teamId, 'both@example.com'), 'unsubscribed');
    const [row] = (await rows(teamId)).filter((r) => r.email === 'both@example.com');
    assert.equal(row!.reason, 'unsubscribed');
  });

  test('what the recipient did stays: unsubscribed, complained and erased are 409; manual over an unsubscribe falls back to it', async () => {
    const { teamId, c } = await team();
    await c.post('/email/contacts/unsubscribe', { email: 'left@example.com' });
    const unsub = await c.del(del('left@example.com'));
    assert.equal(unsub.statusCode, 409, unsub.body);
    assert.equal(unsub.json().error.code, 'CONFLICT');
    assert.match(unsub.json().error.message, /unsubscribed/);

    await c.post('/email/suppressions', { email: 'spam@example.com', reason: 'complained' });
    assert.equal((await c.del(del('spam@example.com'))).statusCode, 409);

    // The trick that must not work: add a manual entry over the unsubscribe, then remove it.
    const over = await c.post('/email/suppressions', { email: 'left@example.com' });
    assert.equal(over.json().suppressions[0].reason, 'manual');
    const back = await c.del(del('left@example.com'));
    assert.equal(back.statusCode, 200, back.body);
    assert.deepEqual(back.json().removed, ['manual']);
    assert.equal(back.json().suppression.reason, 'unsubscribed');
    assert.equal(await contactStatus(teamId, 'left@example.com'), 'unsubscribed');
    assert.equal((await c.del(del('left@example.com'))).statusCode, 409, 'and now it is the unsubscribe alone');

    // Erased: found by the keyed hash of the address, and kept.
    await t.database.db.insertInto('suppressions').values({ team_id: teamId, email: null, email_hmac: emailHmac(secret(), 'erased@example.com'), reason: 'erased', reasons: ['erased'] }).execute();
    const erased = await c.del(del('Erased@example.com'));
    assert.equal(erased.statusCode, 409, erased.body);
    assert.match(erased.json().error.message, /erased/);
    // A manual entry for the same address in clear goes; the erased one stays and is answered.
    await c.post('/email/suppressions', { email: 'erased@example.com' });
    const mixed = await c.del(del('erased@example.com'));
    assert.equal(mixed.statusCode, 200, mixed.body);
    assert.deepEqual([mixed.json().suppression.email, mixed.json().suppression.reason], [null, 'erased']);

    const left = (await rows(teamId)).map((r) => [r.email, r.reason]);
    assert.deepEqual(left, [['left@example.com', 'unsubscribed'], ['spam@example.com', 'complained'], [null, 'erased']]);
  });
});

describe('teams', () => {
  test("another team's entries are not listed, and removing one is 404 and changes nothing", async () => {
    const a = await team();
    const b = await team();
    await a.c.post('/email/contacts/upsert', { email: 'shared@example.com' });
    await a.c.post('/email/suppressions', { email: 'shared@example.com', reason: 'bounced_hard' });
    await b.c.post('/email/suppressions', { email: 'mine@example.com' });
    assert.deepEqual((await b.c.get('/email/suppressions')).json().suppressions.map((s: any) => s.email), ['mine@example.com']);
    assert.equal((await b.c.get('/email/suppressions?search=shared')).json().meta.total, '0');
    const res = await b.c.del(del('shared@example.com'));
    assert.equal(res.statusCode, 404);
    assert.equal((await rows(a.teamId)).length, 1);
    assert.equal(await contactStatus(a.teamId, 'shared@example.com'), 'bounced');
    // B adding the same address touches neither A's entry nor A's contact.
    await b.c.post('/email/suppressions', { email: 'shared@example.com', reason: 'complained' });
    assert.equal((await rows(a.teamId))[0]!.reason, 'bounced_hard');
    assert.equal(await contactStatus(a.teamId, 'shared@example.com'), 'bounced');
  });

  test('without a key: 401, the body unread', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/public/v1/email/suppressions', payload: { email: 'a@example.com' } });
    assert.equal(res.statusCode, 401);
    assert.equal((await t.app.inject({ method: 'DELETE', url: '/public/v1/email/suppressions/a%40example.com' })).statusCode, 401);
  });
});
