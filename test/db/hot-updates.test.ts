// A campaign send's progress counters are written for every batch of results
// it sends, while other senders' snapshots still see the row's last versions,
// so those cannot be pruned yet. The update changes no indexed column; it stays
// HOT (same page, no new index entries) only while the row's page has room for
// the new version. Without it the row moved to a new page at nearly every
// update, and readers of the campaign's latest send walked all those pages
// (migration 0034). Here a snapshot held open pins every version, as a busy
// moment does, and the row must stay on its page for the next updates.
// The same for a contact's counters, updated at every message sent to it, on
// pages that a bulk insert filled (migration 0035).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { buildTestApp, makeTeam, type TestApp } from '../helpers.ts';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const q = (text: string, values: unknown[] = []) => t.database.pool.query(text, values);

/** The heap page (block number) a row's current version is on. */
async function pageOf(table: 'campaign_sends' | 'contacts', id: string): Promise<number> {
  const { rows } = await q(`SELECT (ctid::text::point)[0]::int AS page FROM ${table} WHERE id = $1`, [id]);
  return rows[0].page;
}

/**
 * Runs `update` `times` times, each in its own transaction, while another
 * session's REPEATABLE READ snapshot of `table` keeps every old version from
 * being pruned; after each the row must still be on `page`.
 */
async function updatesStayOnPage(table: 'campaign_sends' | 'contacts', id: string, page: number, times: number, update: (i: number) => Promise<unknown>): Promise<void> {
  const pin = await t.database.pool.connect();
  try {
    await pin.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await pin.query(`SELECT count(*) FROM ${table}`);
    for (let i = 1; i <= times; i++) {
      await update(i);
      assert.equal(await pageOf(table, id), page, `update ${i} moved the row to another page`);
    }
  } finally {
    await pin.query('ROLLBACK');
    pin.release();
  }
}

test('a campaign send\'s counter updates stay on its page while older snapshots pin its versions', async () => {
  const { teamId } = await makeTeam(t.database.db);
  // Six sends with a send_data of about a kilobyte (a segment of a few rules), inserted in order.
  const sendData = JSON.stringify({
    template_ids: [crypto.randomUUID()], mail_account_ids: [crypto.randomUUID()],
    segment_query: { rules: Array.from({ length: 8 }, (_, i) => ({ field: `custom_fields.attribute_${i}`, operator: 'equals', value: 'x'.repeat(80) })) },
  });
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) {
    const { rows: [c] } = await q(`INSERT INTO campaigns (team_id, name, draft_data, trigger_events) VALUES ($1, $2, '{}', '{contact.saved}') RETURNING id`, [teamId, `c${i}`]);
    const { rows: [s] } = await q(
      `INSERT INTO campaign_sends (team_id, campaign_id, campaign_type, send_data) VALUES ($1, $2, 'event_triggered', $3::jsonb) RETURNING id`,
      [teamId, c.id, sendData]);
    ids.push(s.id);
  }
  const first = ids[0]!;
  const page = await pageOf('campaign_sends', first);
  // A row of 1.1 to 2 kB: above it PostgreSQL would compress send_data; below, six rows would not fill a page.
  const { rows: [size] } = await q('SELECT pg_column_size(s.*) AS bytes FROM campaign_sends s WHERE id = $1', [first]);
  assert.ok(size.bytes > 1_100 && size.bytes < 2_000, `row of ${size.bytes} bytes`);

  // What mail/send-record.ts writes per batch of results. Half a page holds two
  // more versions of such a row; on full pages (without migration 0034) the
  // first update already moves.
  await updatesStayOnPage('campaign_sends', first, page, 2, (i) => q(
    `UPDATE campaign_sends s SET updated_at = now(), send_progress = s.send_progress || jsonb_build_object('total_sent', $2::int)
      WHERE id = $1`, [first, i * 25]));
  const { rows } = await q(`SELECT send_progress ->> 'total_sent' AS sent FROM campaign_sends WHERE id = $1`, [first]);
  assert.deepEqual(rows, [{ sent: '50' }]);
});

test('a contact\'s send counters stay on its page after a bulk insert filled it', async () => {
  const { teamId } = await makeTeam(t.database.db);
  // As a bulk upsert writes them: one statement, consecutive pages filled.
  await q(`INSERT INTO contacts (team_id, email, first_name, last_name, phone, country_code, tags)
           SELECT $1, 'bulk' || i || '@example.com', 'First' || i, 'Last' || i, '+4930' || i, 'de', '{customer,newsletter}'
             FROM generate_series(1, 500) AS i`, [teamId]);
  const { rows: [first] } = await q(
    `SELECT id, (ctid::text::point)[0]::int AS page, pg_column_size(c.*) AS bytes FROM contacts c
      WHERE team_id = $1 ORDER BY ctid LIMIT 1`, [teamId]);
  // Rows well under a tenth of a page: the free tenth holds at least two new versions.
  assert.ok(first.bytes < 400, `row of ${first.bytes} bytes`);
  // What mail/send-record.ts writes per message sent.
  await updatesStayOnPage('contacts', first.id, first.page, 2, () => q(
    `UPDATE contacts c SET sent_count = c.sent_count + 1, first_sent_at = coalesce(c.first_sent_at, now()), last_sent_at = now()
      WHERE id = $1`, [first.id]));
  assert.deepEqual((await q('SELECT sent_count FROM contacts WHERE id = $1', [first.id])).rows, [{ sent_count: 2 }]);
});
