// Sign-in, sessions, CSRF, sign-in rate limit and password links, through app.inject.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createPasswordToken, createUser } from '../../src/dashboard/users.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';
import { PASSWORD, Session, makeUserTeam, signedIn } from './session.ts';

let t: TestApp;
before(async () => {
  // Many sign-ins from 127.0.0.1 here; the limit has its own app below.
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
});
after(async () => t?.close());

describe('sign-in', () => {
  test('signs in with e-mail and password; session cookie is signed, HttpOnly, SameSite=Lax', async () => {
    const { email } = await makeUserTeam(t.database.db);
    const s = new Session(t.app);
    const page = await s.get('/sign-in');
    assert.equal(page.statusCode, 200);
    assert.match(page.body, /<label for="email">/);
    const res = await s.post('/sign-in', { email: email.toUpperCase(), password: PASSWORD });
    assert.equal(res.statusCode, 303);
    assert.equal(res.headers.location, '/');
    const setCookie = String(res.headers['set-cookie']);
    assert.match(setCookie, /plv_session=[^;]+\.[^;]+;/); // value.signature
    assert.match(setCookie, /HttpOnly/);
    assert.match(setCookie, /SameSite=Lax/);
    assert.doesNotMatch(setCookie, /Secure/); // PUBLIC_URL is http in tests
    const campaigns = await s.get('/campaigns');
    assert.equal(campaigns.statusCode, 200);
    assert.match(campaigns.body, new RegExp(email));
  });

  test('returns to a local page after sign-in, never to another site; Secure cookies behind https', async () => {
    const { email } = await makeUserTeam(t.database.db);
    const s = new Session(t.app);
    await s.get('/sign-in?next=%2Fcontacts%3Fq%3Da');
    assert.equal((await s.post('/sign-in', { email, password: PASSWORD, next: '/contacts?q=a' })).headers.location, '/contacts?q=a');
    for (const next of ['//evil.example.com/x', '/\\evil.example.com', 'https://evil.example.com']) {
      const other = new Session(t.app);
      await other.get('/sign-in');
      assert.equal((await other.post('/sign-in', { email, password: PASSWORD, next })).headers.location, '/', next);
    }
    const https = await buildTestApp({ database: t.database, config: { publicUrl: 'https://plover.example.com' } });
    const hs = new Session(https.app);
    await hs.get('/sign-in');
    const res = await hs.post('/sign-in', { email, password: PASSWORD });
    assert.match(String(res.headers['set-cookie']), /plv_session=[^,]*Secure/);
    await https.close();
  });

  test('wrong password and unknown e-mail get the same answer', async () => {
    const { email } = await makeUserTeam(t.database.db);
    const s = new Session(t.app);
    await s.get('/sign-in');
    const wrong = await s.post('/sign-in', { email, password: 'not the password' });
    const unknown = await s.post('/sign-in', { email: `nobody${Date.now()}@example.com`, password: PASSWORD });
    assert.equal(wrong.statusCode, 401);
    assert.equal(unknown.statusCode, 401);
    assert.match(wrong.body, /do not match an account/);
    assert.equal(s.jar.has('plv_session'), false);
  });

  test('pages need a session: redirect to sign-in with the way back', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/contacts?q=a' });
    assert.equal(res.statusCode, 303);
    assert.equal(res.headers.location, '/sign-in?next=%2Fcontacts%3Fq%3Da');
    const forged = await t.app.inject({ method: 'GET', url: '/campaigns', headers: { cookie: 'plv_session=abc.def' } });
    assert.equal(forged.statusCode, 303);
    assert.equal(forged.headers.location, '/sign-in?next=%2Fcampaigns', 'a forged cookie is no session: back to sign-in');
    assert.doesNotMatch(forged.body, /Dash team/);
  });

  test('sign-out ends the session on the server, not only in the browser', async () => {
    const { session, email } = await signedIn(t.app, t.database.db);
    const stolen = [...session.jar].map(([k, v]) => `${k}=${v}`).join('; ');
    const withStolen = () => t.app.inject({ method: 'GET', url: '/campaigns', headers: { cookie: stolen } });
    const sessionsOfUser = async () =>
      (await t.database.db.selectFrom('dashboard_sessions as s').innerJoin('dashboard_users as u', 'u.id', 's.user_id')
        .select('s.id').where('u.email', '=', email).execute()).length;
    // The copied cookie is a live session before sign-out: otherwise the replay below would prove nothing.
    const live = await withStolen();
    assert.equal(live.statusCode, 200, live.body.slice(0, 300));
    assert.match(live.body, new RegExp(email));
    assert.equal(await sessionsOfUser(), 1);

    const out = await session.post('/sign-out');
    assert.equal(out.statusCode, 303);
    assert.equal(out.headers.location, '/sign-in');
    assert.match(String(out.headers['set-cookie']), /plv_session=;.*Expires=Thu, 01 Jan 1970/, 'the browser cookie is cleared');
    assert.equal(await sessionsOfUser(), 0, 'the session row is gone');
    const replay = await withStolen();
    assert.equal(replay.statusCode, 303);
    assert.equal(replay.headers.location, '/sign-in?next=%2Fcampaigns');
  });

  test('sign-in is throttled per (e-mail, client IP) and per client IP; nobody elsewhere is locked out', async () => {
    const limited = await buildTestApp({ database: t.database, config: { signInRateLimitPerMinute: 5 } });
    const { email } = await makeUserTeam(t.database.db);
    const s = new Session(limited.app);
    await s.get('/sign-in');
    const attempt = (ip: string, form: Record<string, string>) =>
      limited.app.inject({
        method: 'POST',
        url: '/sign-in',
        remoteAddress: ip,
        headers: { cookie: [...s.jar].map(([k, v]) => `${k}=${v}`).join('; '), 'content-type': 'application/x-www-form-urlencoded' },
        payload: new URLSearchParams({ _csrf: s.csrf, ...form }).toString(),
      });
    // IP A guesses one address: its budget for that address (5) runs out.
    const fromA: number[] = [];
    for (let i = 0; i < 7; i++) fromA.push((await attempt('127.0.0.50', { email, password: 'guess' + i })).statusCode);
    assert.deepEqual(fromA, [401, 401, 401, 401, 401, 429, 429]);
    // Even the right password waits it out from A...
    assert.equal((await attempt('127.0.0.50', { email, password: PASSWORD })).statusCode, 429);
    // ...but the owner, from IP B, signs in: A's failures never lock them out.
    const fromB = await attempt('127.0.0.51', { email, password: PASSWORD });
    assert.equal(fromB.statusCode, 303, fromB.body);
    assert.equal(fromB.headers.location, '/');
    // One IP spraying many addresses: the per-IP budget (3 × 5 = 15 a minute) applies.
    const spray: number[] = [];
    for (let i = 0; i < 17; i++) spray.push((await attempt('127.0.0.60', { email: `spray${i}@example.com`, password: 'x' })).statusCode);
    assert.deepEqual(spray, [...Array(15).fill(401), 429, 429]);
    // Over the IP budget the form is not even read: no body is needed for the 429.
    const unread = await limited.app.inject({
      method: 'POST',
      url: '/sign-in',
      remoteAddress: '127.0.0.60',
      headers: { cookie: [...s.jar].map(([k, v]) => `${k}=${v}`).join('; '), 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'not a form at all: %zz&&&' + 'x'.repeat(1000),
    });
    assert.equal(unread.statusCode, 429);
    assert.ok(Number(unread.headers['retry-after']) > 0);
    await limited.close();
  });
});

describe('CSRF', () => {
  test('a POST without the token, or with a wrong one, is refused with 403 and changes nothing', async () => {
    const { session, teamId } = await signedIn(t.app, t.database.db);
    const missing = await session.post('/developer/api-keys', { name: 'csrf-less', _csrf: null });
    assert.equal(missing.statusCode, 403);
    const wrong = await session.post('/developer/api-keys', { name: 'csrf-wrong', _csrf: 'x'.repeat(43) });
    assert.equal(wrong.statusCode, 403);
    const keys = await t.database.db.selectFrom('api_keys').select('name').where('team_id', '=', teamId).execute();
    assert.deepEqual(keys.map((k) => k.name), ['test key']);
  });

  test("another session's token is refused", async () => {
    const a = await signedIn(t.app, t.database.db);
    const b = await signedIn(t.app, t.database.db);
    await a.session.get('/developer/api-keys');
    await b.session.get('/developer/api-keys');
    const res = await a.session.post('/developer/api-keys', { name: 'x', _csrf: b.session.csrf });
    assert.equal(res.statusCode, 403);
  });

  test('the sign-in form needs its token too', async () => {
    const { email } = await makeUserTeam(t.database.db);
    const s = new Session(t.app);
    const res = await s.post('/sign-in', { email, password: PASSWORD, _csrf: null });
    assert.equal(res.statusCode, 403);
  });
});

describe('password links', () => {
  test('the first-start link creates the first user, works once, and signs in', async () => {
    const { teamId } = await makeTeam(t.database.db);
    const token = await createPasswordToken(t.database.db, teamId, null);
    const s = new Session(t.app);
    const page = await s.get(`/set-password?token=${token}`);
    assert.equal(page.statusCode, 200);
    assert.equal(page.headers['referrer-policy'], 'no-referrer');
    const email = `first${Date.now()}@example.com`;
    const short = await s.post('/set-password', { token, email, password: 'short', confirm: 'short' });
    assert.equal(short.statusCode, 422);
    const ok = await s.post('/set-password', { token, email, password: PASSWORD, confirm: PASSWORD });
    assert.equal(ok.statusCode, 303);
    assert.equal((await s.get('/campaigns')).statusCode, 200);
    const again = await new Session(t.app).get(`/set-password?token=${token}`);
    assert.equal(again.statusCode, 404);
    const user = await t.database.db.selectFrom('dashboard_users').select(['team_id', 'password_hash']).where('email', '=', email).executeTakeFirstOrThrow();
    assert.equal(user.team_id, teamId);
    assert.match(user.password_hash!, /^scrypt\$32768\$8\$1\$/);
  });

  test("a user's link sets their password and ends their other sessions", async () => {
    const { teamId } = await makeTeam(t.database.db);
    const email = `reset${Date.now()}@example.com`;
    const created = await createUser(t.database.db, teamId, email, PASSWORD);
    const old = new Session(t.app);
    assert.equal((await old.signIn(email)).statusCode, 303);
    const token = await createPasswordToken(t.database.db, teamId, created.id);
    const s = new Session(t.app);
    await s.get(`/set-password?token=${token}`);
    const res = await s.post('/set-password', { token, password: 'another long password', confirm: 'another long password' });
    assert.equal(res.statusCode, 303);
    assert.equal((await old.get('/campaigns')).statusCode, 303);
    assert.equal((await new Session(t.app).signIn(email, 'another long password')).statusCode, 303);
  });

  test('junk tokens and junk input never give a 500', async () => {
    const s = new Session(t.app);
    for (const url of ['/set-password', '/set-password?token=', '/set-password?token=%00', '/set-password?token[]=a', `/set-password?token=${'a'.repeat(5000)}`]) {
      const res = await s.get(url);
      assert.equal(res.statusCode, 404, url);
    }
    await s.get('/sign-in');
    const nul = await s.post('/sign-in', { email: 'a\u0000b@example.com', password: 'x' });
    assert.equal(nul.statusCode, 422);
  });
});
