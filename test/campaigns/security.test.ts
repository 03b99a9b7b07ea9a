// Campaigns, team isolation: another team's campaigns are invisible (404, never
// listed, never changed) and another team's templates and mail accounts cannot
// be used.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { client, countRows, makeFixture, validBody } from './fixtures.ts';

describe('campaign team isolation', () => {
  let t: TestApp;
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  async function twoTeams() {
    const a = await makeFixture(t);
    const b = await makeFixture(t);
    const res = await client(t, a.key).post('/', validBody(a, { name: 'Team A secret launch' }));
    assert.equal(res.statusCode, 201, res.body);
    return { a, b, campaign: res.json().campaign };
  }

  test("get, decisions, start and stop of another team's campaign: 404, and the campaign is untouched", async () => {
    const { a, b, campaign } = await twoTeams();
    const asB = client(t, b.key);
    for (const res of [await asB.get(`/${campaign.id}`), await asB.get(`/${campaign.id}/decisions`), await asB.post(`/${campaign.id}/stop`), await asB.post(`/${campaign.id}/start`)]) {
      assert.equal(res.statusCode, 404, res.body);
      assert.deepEqual(res.json(), { ok: false, error: { code: 'NOT_FOUND', message: 'campaign not found' } });
      assert.doesNotMatch(res.body, /secret launch|event_triggered/);
    }
    // B's stop changed nothing: A still sees it active, updated_at as created.
    const seen = (await client(t, a.key).get(`/${campaign.id}`)).json().campaign;
    assert.deepEqual(seen, campaign);

    // And once A pauses it, B cannot resume it.
    assert.equal((await client(t, a.key).post(`/${campaign.id}/stop`)).statusCode, 200);
    assert.equal((await asB.post(`/${campaign.id}/start`)).statusCode, 404);
    const row = await t.database.db.selectFrom('campaign_sends').select('status').where('campaign_id', '=', campaign.id).executeTakeFirstOrThrow();
    assert.equal(row.status, 'paused');
  });

  test("list never shows another team's campaigns, with or without search", async () => {
    const { a, b, campaign } = await twoTeams();
    const own = await client(t, b.key).post('/', validBody(b, { name: 'Team B newsletter' }));
    assert.equal(own.statusCode, 201);

    const listB = (await client(t, b.key).get('/?per_page=100')).json();
    assert.deepEqual(listB.campaigns.map((c: { id: string }) => c.id), [own.json().campaign.id]);
    assert.equal(listB.meta.total, '1');
    for (const c of listB.campaigns) assert.equal(c.team_id, b.teamId);

    const searchB = (await client(t, b.key).get('/?search=secret')).json();
    assert.deepEqual(searchB.campaigns, []);
    assert.equal(searchB.meta.total, '0');

    const listA = (await client(t, a.key).get('/')).json();
    assert.deepEqual(listA.campaigns.map((c: { id: string }) => c.id), [campaign.id]);
  });

  test("another team's template or mail account cannot be used (422 names it), nothing written", async () => {
    const { a, b } = await twoTeams();
    const asB = client(t, b.key);

    const withTemplate = await asB.post('/', validBody(b, { template_ids: [b.templateId, a.templateId] }));
    assert.equal(withTemplate.statusCode, 422, withTemplate.body);
    assert.deepEqual(withTemplate.json().error.details, [
      { field: 'template_ids[1]', message: `no active template ${a.templateId} in this team` },
    ]);

    const withAccount = await asB.post('/', validBody(b, { mail_account_ids: [a.accountId] }));
    assert.equal(withAccount.statusCode, 422, withAccount.body);
    assert.deepEqual(withAccount.json().error.details, [
      { field: 'mail_account_ids[0]', message: `no active mail account ${a.accountId} in this team` },
    ]);

    assert.deepEqual(await countRows(t.database.db, b.teamId), { campaigns: 0, sends: 0 });
    assert.deepEqual(await countRows(t.database.db, a.teamId), { campaigns: 1, sends: 1 });
  });

  test('the owning team comes from the key, whatever the body says', async () => {
    const { a, b } = await twoTeams();
    const res = await client(t, b.key).post('/', { ...validBody(b), team_id: a.teamId });
    assert.equal(res.statusCode, 422, 'team_id is not an accepted field');
    const ok = await client(t, b.key).post('/', validBody(b));
    assert.equal(ok.json().campaign.team_id, b.teamId);
    assert.equal(ok.json().campaign.campaign_sends[0].campaign_id, ok.json().campaign.id);
    const row = await t.database.db.selectFrom('campaign_sends').select('team_id').where('campaign_id', '=', ok.json().campaign.id).executeTakeFirstOrThrow();
    assert.equal(row.team_id, b.teamId);
  });
});
