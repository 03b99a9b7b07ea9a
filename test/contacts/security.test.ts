import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

describe('contacts: team isolation', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());
  const post = (key: string, url: string, payload: unknown) =>
    t.app.inject({ method: 'POST', url: `/public/v1/email/contacts/${url}`, headers: { 'x-api-key': key }, payload: payload as object });

  test('the same address in two teams is two contacts; neither sees the other', async () => {
    const a = await makeTeam(t.database.db);
    const b = await makeTeam(t.database.db);
    const ca = (await post(a.key, 'upsert', { email: 'shared@x.io', first_name: 'A' })).json();
    const cb = (await post(b.key, 'upsert', { email: 'shared@x.io', first_name: 'B' })).json();
    assert.equal(ca.created, true);
    assert.equal(cb.created, true, "b's upsert does not find a's contact");
    assert.notEqual(ca.contact.id, cb.contact.id);
    assert.equal(cb.contact.first_name, 'B');
    const bulk = (await post(a.key, 'bulk-upsert', { contacts: [{ email: 'shared@x.io', first_name: 'A2' }] })).json();
    assert.deepEqual(bulk.summary, { received: 1, created: 0, updated: 1, unchanged: 0 });
    const rowB = await t.database.db.selectFrom('contacts').select('first_name').where('id', '=', cb.contact.id).executeTakeFirstOrThrow();
    assert.equal(rowB.first_name, 'B', "a's bulk upsert did not touch b's contact");
  });

  test("unsubscribing in one team leaves the other team's contact active and unlisted", async () => {
    const a = await makeTeam(t.database.db);
    const b = await makeTeam(t.database.db);
    await post(a.key, 'upsert', { email: 'both@x.io' });
    await post(b.key, 'upsert', { email: 'both@x.io' });
    await post(a.key, 'unsubscribe', { email: 'both@x.io' });
    const listA = (await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes', headers: { 'x-api-key': a.key } })).json();
    const listB = (await t.app.inject({ url: '/public/v1/email/contacts/unsubscribes', headers: { 'x-api-key': b.key } })).json();
    assert.deepEqual(listA.contacts.map((c: { email: string }) => c.email), ['both@x.io']);
    assert.equal(listA.contacts[0].team_id, a.teamId);
    assert.deepEqual(listB.contacts, []);
    assert.equal(listB.meta.total, '0');
  });

  test('every contacts route needs a key', async () => {
    for (const [method, url] of [
      ['POST', 'upsert'], ['POST', 'bulk-upsert'], ['POST', 'unsubscribe'], ['POST', 'bulk-unsubscribe'], ['GET', 'unsubscribes'],
    ] as const) {
      const res = await t.app.inject({ method, url: `/public/v1/email/contacts/${url}`, payload: method === 'POST' ? {} : undefined });
      assert.equal(res.statusCode, 401, `${method} ${url}`);
    }
  });
});
