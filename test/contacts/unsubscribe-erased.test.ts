// Unsubscribing an address while a concurrent erasure deletes its contact
// (found by the contract fuzz, seed 2021910049: a burst with an erase and an
// unsubscribe of one address answered 500). The unsubscribe's UPDATE waits for
// the erasure's lock and then finds the row gone, while its snapshot still saw
// the row; the address must end up recorded as an unsubscribed contact.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { unsubscribeContacts } from '../../src/contacts/queries.ts';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

test('an unsubscribe that raced an erasure of the same contact records the address unsubscribed', async () => {
  const { teamId, key } = await makeTeam(t.database.db);
  const upsert = await t.app.inject({
    method: 'POST', url: '/public/v1/email/contacts/upsert',
    headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload: JSON.stringify({ email: 'race@example.com' }),
  });
  assert.equal(upsert.statusCode, 200, upsert.body);
  // The erasure as eraseAddress does it: the contact locked first (so the
  // unsubscribe's insert sees a live row and does nothing, and its UPDATE
  // waits), then deleted and committed.
  const eraser = await t.database.pool.connect();
  try {
    await eraser.query('BEGIN');
    await eraser.query('SELECT id FROM contacts WHERE team_id = $1 AND email = $2 FOR UPDATE', [teamId, 'race@example.com']);
    const unsubscribe = t.database.db.transaction().execute((tx) => unsubscribeContacts(tx, teamId, ['race@example.com'], 'text', 'api'));
    // The unsubscribe is blocked on the deleted row's lock until the erasure commits.
    for (let i = 0; i < 100; i++) {
      const { rows } = await t.database.pool.query(
        `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'`);
      if (rows[0].n > 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    await eraser.query('DELETE FROM contacts WHERE team_id = $1 AND email = $2', [teamId, 'race@example.com']);
    await eraser.query('COMMIT');
    const result = await unsubscribe;
    assert.equal(result.unsubscribed, 1, 'recorded as a new unsubscribed contact');
  } finally {
    eraser.release();
  }
  const { rows } = await sql<{ status: string }>`SELECT status FROM contacts WHERE team_id = ${teamId} AND email = 'race@example.com'`.execute(t.database.db);
  assert.deepEqual(rows, [{ status: 'unsubscribed' }]);
});
