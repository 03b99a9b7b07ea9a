// The contacts list's filters run on their indexes (migration 0014), checked on
// the plans of the very queries the route runs (contactListQueries): a prefix
// search is a range scan of (team_id, email text_pattern_ops), not a scan of
// the team; a rare tag is found through the GIN index on tags; a status through
// (team_id, status, created_at). Timings on 1,000,000 contacts:
// `npm run bench -- contacts` (docs/decisions.md).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { contactListQueries } from '../../src/contacts/manage.ts';
import { createTestDatabase, makeTeam, type TestDatabase } from '../helpers.ts';

function indexesOf(node: any, out = new Set<string>()): Set<string> {
  if (node['Index Name']) out.add(node['Index Name']);
  for (const c of node.Plans ?? []) indexesOf(c, out);
  return out;
}

describe('contacts list: every filter has an index', () => {
  let d: TestDatabase;
  let teamId: string;
  before(async () => {
    d = await createTestDatabase();
    teamId = (await makeTeam(d.db)).teamId;
    const other = await makeTeam(d.db, 'other');
    for (const [team, prefix] of [[teamId, 'u'], [other.teamId, 'o']] as const) {
      await d.pool.query(
        `INSERT INTO contacts (team_id, email, status, tags, created_at)
         SELECT $1, $2 || g || '@d' || (g % 97) || '.example',
                CASE WHEN g % 50 = 0 THEN 'complained' WHEN g % 5 = 0 THEN 'unsubscribed' ELSE 'active' END,
                CASE WHEN g % 100 = 0 THEN ARRAY['rare', 'news'] ELSE ARRAY['news'] END,
                now() - (g || ' seconds')::interval
           FROM generate_series(1, 30000) g`, [team, prefix]);
    }
    await d.pool.query('ANALYZE contacts');
  });
  after(() => d.drop());

  async function plan(kind: 'count' | 'page', filter: Parameters<typeof contactListQueries>[2]): Promise<Set<string>> {
    const q = contactListQueries(d.db, teamId, filter);
    const compiled = (kind === 'count' ? q.count : q.page(20, 0)).compile();
    const { rows } = await d.pool.query(`EXPLAIN (FORMAT JSON) ${compiled.sql}`, compiled.parameters as unknown[]);
    return indexesOf(rows[0]['QUERY PLAN'][0].Plan);
  }

  test('prefix search: the count and the page range-scan the prefix index', async () => {
    for (const kind of ['count', 'page'] as const) {
      const used = await plan(kind, { search: 'u1234' });
      assert.ok(used.has('contacts_team_email_prefix_idx'), `${kind}: ${[...used].join(', ') || 'no index'}`);
    }
  });

  test('a rare tag is counted through the GIN index; a rare status through the status index', async () => {
    const tag = await plan('count', { tag: 'rare' });
    assert.ok(tag.has('contacts_tags_idx'), `tag: ${[...tag].join(', ') || 'no index'}`);
    for (const kind of ['count', 'page'] as const) {
      const status = await plan(kind, { status: 'complained' });
      assert.ok(status.has('contacts_team_status_created_idx'), `status ${kind}: ${[...status].join(', ') || 'no index'}`);
    }
  });

  test('the escaped prefix still finds its rows (and only them)', async () => {
    const q = contactListQueries(d.db, teamId, { search: 'U1234' });
    const rows = await q.page(100, 0).execute();
    assert.ok(rows.length > 0);
    assert.ok(rows.every((r) => r.email.startsWith('u1234') && r.team_id === teamId));
    assert.equal((await contactListQueries(d.db, teamId, { search: 'u1234_' }).count.executeTakeFirstOrThrow()).n, 0, '_ is literal');
  });
});
