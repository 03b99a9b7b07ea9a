// The fold under concurrency: writers add deltas while two folds run at once
// and a reader reads; every fact lands in a bucket exactly once (no delta
// folded twice, none lost), the delta table ends empty, and no read ever sees
// more than was written or less than it saw before (a read never counts a
// delta and the bucket it went into together).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { addMessageFacts } from '../../src/stats/deltas.ts';
import { foldStats } from '../../src/stats/fold.ts';
import { alignRange, readStats } from '../../src/stats/read.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

describe('stats fold', () => {
  let d: TestDatabase;
  before(async () => {
    d = await createTestDatabase();
  });
  after(() => d.drop());

  test('concurrent writers, two folds and a reader: every fact counted once, reads monotonic and bounded', async () => {
    const { teamId } = await makeTeam(d.db);
    const { rows: msgs } = await sql<{ id: string }>`
      INSERT INTO email_send_log (team_id, email, status, source, queued_at, created_at, updated_at)
      SELECT ${teamId}::uuid, 'f' || g || '@fold.example.com', 'sent', 'transactional', now(), now(), now() FROM generate_series(1, 50) g
      RETURNING id`.execute(d.db);
    const WRITERS = 4;
    const ROUNDS = 60;
    let written = 0;
    let writing = true;
    const writers = Array.from({ length: WRITERS }, async (_, w) => {
      for (let r = 0; r < ROUNDS; r++) {
        const facts = msgs.slice(0, 1 + ((w + r) % 10)).map((m) => ({ messageId: m.id, key: 'sent' as const, at: new Date() }));
        await d.db.transaction().execute((tx) => addMessageFacts(tx, facts));
        written += facts.length;
      }
    });
    const folds = [0, 1].map(async () => {
      let n = 0;
      while (writing) n += await foldStats(d.db, 25);
      return n;
    });
    const range = await alignRange(d.db, new Date(Date.now() - 86_400_000), new Date(Date.now() + 3_600_000), 'hour', 'UTC');
    const seen: number[] = [];
    const reader = (async () => {
      while (writing) {
        const before = written;
        const s = await readStats(d.db, teamId, { kind: 'transactional' }, range, 'hour', 'UTC');
        // `written` counts a batch after its commit: a read may see up to the batches in flight more.
        assert.ok(s.totals.sent <= written + WRITERS * 10, `read ${s.totals.sent}, written ${written}`);
        assert.ok(s.totals.sent >= before, `read ${s.totals.sent} after ${before} were committed`);
        if (seen.length) assert.ok(s.totals.sent >= seen.at(-1)!, `went back from ${seen.at(-1)} to ${s.totals.sent}`);
        seen.push(s.totals.sent);
      }
    })();
    await Promise.all(writers);
    writing = false;
    const foldedConcurrently = (await Promise.all(folds)).reduce((a, b) => a + b, 0);
    await reader;
    await foldStats(d.db);
    const deltas = await sql<{ n: number }>`SELECT count(*)::int AS n FROM stats_deltas`.execute(d.db);
    assert.equal(deltas.rows[0]!.n, 0);
    const buckets = await sql<{ sent: number }>`SELECT sum(sent)::int AS sent FROM stats_buckets WHERE team_id = ${teamId}::uuid`.execute(d.db);
    assert.equal(buckets.rows[0]!.sent, written, 'every fact once in the buckets');
    const final = await readStats(d.db, teamId, { kind: 'transactional' }, range, 'hour', 'UTC');
    assert.equal(final.totals.sent, written);
    assert.ok(foldedConcurrently > 0, 'the folds ran while writers wrote');
    assert.ok(seen.length > 3, `the reader read ${seen.length} times`);
  });
});
