// PATCH of templates and campaigns, DELETE of campaigns (issue 18): happy
// paths, validation, other teams, and what they do to mail: a PATCHed template
// is what the next campaign send renders, a deleted campaign's queued message
// is cancelled and never reaches the SMTP sink.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closeTransports } from '../../src/mail/send.ts';
import { updateTemplate } from '../../src/templates/manage.ts';
import { updateCampaign } from '../../src/campaigns/manage.ts';
import { AppError } from '../../src/lib/errors.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { api, createCampaign, drain, insertAccount, sendLog, setup } from '../engine/fixtures.ts';
import { decodeHeader, parseMessage, startCaptureSink, type CaptureSink } from '../engine/sink.ts';

const config = testConfig({ allowedPrivateTargets: ['127.0.0.1'] });

describe('template and campaign updates, campaign delete', () => {
  let t: TestApp;
  let sink: CaptureSink;
  before(async () => {
    t = await buildTestApp({ config });
    sink = await startCaptureSink();
  });
  after(async () => {
    closeTransports();
    await sink.close();
    await t.close();
  });

  const patch = (key: string, url: string, payload: unknown) =>
    t.app.inject({ method: 'PATCH', url: `/public/v1${url}`, headers: { 'x-api-key': key }, payload: payload as object });
  const del = (key: string, url: string) => t.app.inject({ method: 'DELETE', url: `/public/v1${url}`, headers: { 'x-api-key': key } });

  test('PATCH template: a new version, earlier one kept, alt_content derived again; the next campaign send uses it', async () => {
    const s = await setup(t, sink.port, { subject: 'Old {{ contact.first_name }}', content: '<p>Old body {{ contact.first_name }}</p>' });
    await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], event_triggered_send: { contact_cooldown_interval: 0 } });

    const n0 = sink.messages.length;
    await s.a.post('/email/contacts/upsert', { email: 'ada@example.com', first_name: 'Ada' });
    await drain(t, { config });
    await sink.waitFor(n0 + 1);
    assert.match(parseMessage(sink.messages[n0]!.raw).html, /Old body Ada/);

    const res = await patch(s.key, `/email/templates/${s.templateId}`, {
      subject: 'New {{ contact.first_name }}',
      content: '<p>New body {{ contact.first_name }}</p>',
    });
    assert.equal(res.statusCode, 200, res.body);
    const tpl = res.json().template;
    assert.equal(tpl.version, 2);
    assert.equal(tpl.subject, 'New {{ contact.first_name }}');
    assert.match(tpl.alt_content, /New body/, 'alt_content derived again from the new content');
    const kept = await t.database.db.selectFrom('template_versions').selectAll().where('template_id', '=', s.templateId).execute();
    assert.equal(kept.length, 1);
    assert.equal(kept[0]!.version, 1);
    assert.match(kept[0]!.content, /Old body/);

    // The next trigger of the campaign renders the new version.
    await s.a.post('/email/contacts/upsert', { email: 'ada@example.com', first_name: 'Ada', last_name: 'Lovelace' });
    await drain(t, { config });
    await sink.waitFor(n0 + 2);
    const m = parseMessage(sink.messages[n0 + 1]!.raw);
    assert.match(m.html, /New body Ada/);
    assert.equal(decodeHeader(m.headers.get('subject')!), 'New Ada');

    // The same values again: no new version.
    const same = await patch(s.key, `/email/templates/${s.templateId}`, { subject: 'New {{ contact.first_name }}' });
    assert.equal(same.statusCode, 200, same.body);
    assert.equal(same.json().template.version, 2);
    // An explicit alt_content wins; subject null removes it.
    const alt = await patch(s.key, `/email/templates/${s.templateId}`, { alt_content: 'Plain {{ contact.first_name }}', subject: null });
    assert.equal(alt.json().template.alt_content, 'Plain {{ contact.first_name }}');
    assert.equal(alt.json().template.subject, null);
    assert.equal(alt.json().template.version, 3);
    const got = await s.a.get(`/email/templates/${s.templateId}`);
    assert.equal(got.json().template.version, 3);
  });

  test('PATCH template errors: Liquid syntax with its line, blank name, empty or unknown body, over the cap; nothing changes', async () => {
    const { key, teamId } = await makeTeam(t.database.db);
    const a = api(t, key);
    const created = await a.post('/email/templates', { name: 'T', content_type: 'html', content: '<p>Hi</p>' });
    const id = created.json().template.id;
    const cases: [unknown, string][] = [
      [{ content: '<p>line one</p>\n{% if %}' }, 'content'],
      [{ name: '   ' }, 'name'],
      [{ subject: 'two\nlines' }, 'subject'],
      [{}, '(body)'],
      [{ colour: 'red' }, 'colour'],
      [{ content_type: 'text' }, 'content_type'],
      [{ content: 'x'.repeat(1024 * 1024 + 1) }, 'content'],
    ];
    for (const [body, field] of cases) {
      const res = await patch(key, `/email/templates/${id}`, body);
      assert.equal(res.statusCode, 422, `${JSON.stringify(body).slice(0, 60)}: ${res.body.slice(0, 300)}`);
      const details = res.json().error.details as { field: string; message: string }[];
      assert.ok(details.some((d) => d.field === field), `${field} in ${JSON.stringify(details)}`);
    }
    const syntax = await patch(key, `/email/templates/${id}`, { content: '<p>line one</p>\n{% if %}' });
    assert.match(JSON.stringify(syntax.json().error.details), /line 2/);
    const enumError = await patch(key, `/email/templates/${id}`, { content_type: 'text' });
    assert.match(enumError.json().error.details[0].message, /html/, 'the allowed value is named');
    // Over the template body limit (2 MiB): 413, the body unread.
    const huge = await patch(key, `/email/templates/${id}`, { content: 'x'.repeat(2 * 1024 * 1024 + 10) });
    assert.equal(huge.statusCode, 413, huge.body.slice(0, 200));
    // The function checks unchecked input (a dashboard form) with the same rules.
    await assert.rejects(
      updateTemplate(t.database.db, teamId, id, { name: 5 }, { limits: config.render }),
      (err: unknown) => err instanceof AppError && err.code === 'VALIDATION_FAILED' && err.details?.[0]?.field === 'name',
    );
    await assert.rejects(
      updateCampaign(t.database.db, teamId, '00000000-0000-7000-8000-000000000000', { event_triggered_send: { enabled: 'yes' } }),
      (err: unknown) => err instanceof AppError && err.code === 'VALIDATION_FAILED' && err.details?.[0]?.field === 'event_triggered_send.enabled',
    );
    const after = await a.get(`/email/templates/${id}`);
    assert.equal(after.json().template.version, 1);
    assert.equal(after.json().template.content, '<p>Hi</p>');
  });

  test('PATCH template keeps the last 20 earlier versions', async () => {
    const { key } = await makeTeam(t.database.db);
    const id = (await api(t, key).post('/email/templates', { name: 'v1', content_type: 'html', content: '<p>Hi</p>' })).json().template.id;
    for (let v = 2; v <= 23; v++) {
      const res = await patch(key, `/email/templates/${id}`, { name: `v${v}` });
      assert.equal(res.json().template.version, v, res.body);
    }
    const kept = await t.database.db.selectFrom('template_versions').select(['version', 'name']).where('template_id', '=', id).orderBy('version').execute();
    assert.deepEqual(kept.map((k) => k.version), Array.from({ length: 20 }, (_, i) => i + 3));
    assert.equal(kept[kept.length - 1]!.name, 'v22');
  });

  test('PATCH template of another team, unknown or malformed id: 404, and the function says the same', async () => {
    const owner = await makeTeam(t.database.db);
    const other = await makeTeam(t.database.db);
    const created = await api(t, owner.key).post('/email/templates', { name: 'T', content_type: 'html', content: '<p>Hi</p>' });
    const id = created.json().template.id;
    for (const url of [`/email/templates/${id}`, '/email/templates/00000000-0000-7000-8000-000000000000', '/email/templates/nope']) {
      const res = await patch(other.key, url, { name: 'Stolen' });
      assert.equal(res.statusCode, 404, `${url}: ${res.body}`);
      assert.equal(res.json().error.code, 'NOT_FOUND');
    }
    await assert.rejects(
      updateTemplate(t.database.db, other.teamId, id, { name: 'Stolen' }, { limits: config.render }),
      (err: unknown) => err instanceof AppError && err.code === 'NOT_FOUND',
    );
    assert.equal((await api(t, owner.key).get(`/email/templates/${id}`)).json().template.name, 'T');
  });

  test('PATCH campaign: name, templates, accounts, events, limits merged; validated as create; other team 404', async () => {
    const s = await setup(t, sink.port);
    const { id } = await createCampaign(s.a, {
      template_ids: [s.templateId], mail_account_ids: [s.accountId],
      event_triggered_send: { contact_cooldown_interval: 60, contact_daily_email_cap: 2 },
    });
    const second = await s.a.post('/email/templates', { name: 'Second', content_type: 'html', content: '<p>2</p>' });
    const templateB = second.json().template.id;
    const accountB = await insertAccount(t, s.teamId, sink.port);

    const res = await patch(s.key, `/email/campaigns/${id}`, {
      name: '  Renamed  ',
      template_ids: [templateB],
      mail_account_ids: [s.accountId, accountB],
      events: ['lead_created', 'sale.created'],
      reply_to_email: 'Replies@Example.com',
      event_triggered_send: { contact_daily_email_cap: 5 },
    });
    assert.equal(res.statusCode, 200, res.body);
    const c = res.json().campaign;
    assert.equal(c.name, 'Renamed');
    const sd = c.campaign_sends[0].send_data;
    assert.deepEqual(sd.template_ids, [templateB]);
    assert.deepEqual(sd.mail_account_ids, [s.accountId, accountB]);
    assert.deepEqual(sd.event_triggered_send.events, ['lead.created', 'sale.created']);
    assert.equal(sd.event_triggered_send.contact_daily_email_cap, 5);
    assert.equal(sd.event_triggered_send.contact_cooldown_interval, 60, 'a field not given stays');
    assert.equal(sd.event_triggered_send.enabled, true);
    assert.equal(sd.reply_to_email, 'replies@example.com');
    assert.deepEqual(c.draft_data.send_data, sd);
    const row = await t.database.db.selectFrom('campaigns').select('trigger_events').where('id', '=', id).executeTakeFirstOrThrow();
    assert.deepEqual(row.trigger_events, ['lead.created', 'sale.created'], 'the engine triggers on the new events');

    // Validation as at create: every bad id named, nothing written.
    const foreign = await makeTeam(t.database.db);
    const foreignTemplate = (await api(t, foreign.key).post('/email/templates', { name: 'F', content_type: 'html', content: '<p>f</p>' })).json().template.id;
    const disabled = await insertAccount(t, s.teamId, sink.port, { status: 'disabled' });
    const bad = await patch(s.key, `/email/campaigns/${id}`, {
      name: 'Nope', template_ids: [foreignTemplate], mail_account_ids: [disabled], events: ['order.created'],
      event_triggered_send: { contact_daily_email_cap: 0 },
    });
    assert.equal(bad.statusCode, 422, bad.body);
    const fields = (bad.json().error.details as { field: string }[]).map((d) => d.field);
    for (const f of ['events[0]', 'event_triggered_send.contact_daily_email_cap']) assert.ok(fields.includes(f), `${f} in ${fields.join(", ")}`);
    const bad2 = await patch(s.key, `/email/campaigns/${id}`, { template_ids: [foreignTemplate], mail_account_ids: [disabled], name: ' ' });
    assert.equal(bad2.statusCode, 422, bad2.body);
    assert.deepEqual((bad2.json().error.details as { field: string }[]).map((d) => d.field).sort(), ['mail_account_ids[0]', 'name', 'template_ids[0]']);
    assert.equal((await s.a.get(`/email/campaigns/${id}`)).json().campaign.name, 'Renamed', 'nothing written');
    assert.equal((await patch(s.key, `/email/campaigns/${id}`, {})).statusCode, 422);

    for (const url of [`/email/campaigns/${id}`, '/email/campaigns/00000000-0000-7000-8000-000000000000', '/email/campaigns/x']) {
      const other = await patch(foreign.key, url, { name: 'Stolen' });
      assert.equal(other.statusCode, 404, other.body);
      assert.equal((await del(foreign.key, url)).statusCode, 404);
    }
    assert.equal((await s.a.get(`/email/campaigns/${id}`)).json().campaign.name, 'Renamed');
  });

  test('PATCH campaign limits take effect: a cooldown set by PATCH skips the next trigger', async () => {
    const s = await setup(t, sink.port);
    const { id } = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], event_triggered_send: { contact_cooldown_interval: 0 } });
    await s.a.post('/email/contacts/upsert', { email: 'cool@example.com', first_name: 'A' });
    await drain(t, { config });
    const res = await patch(s.key, `/email/campaigns/${id}`, { event_triggered_send: { contact_cooldown_interval: 3600 } });
    assert.equal(res.statusCode, 200, res.body);
    await s.a.post('/email/contacts/upsert', { email: 'cool@example.com', first_name: 'B' });
    await drain(t, { config });
    const decisions = await t.database.db.selectFrom('campaign_decisions').select(['decision', 'reason']).where('campaign_id', '=', id).orderBy('created_at').execute();
    assert.deepEqual(decisions.map((d) => d.reason), [null, 'cooldown']);
  });

  test('DELETE campaign: its queued message is cancelled and never sent; the log keeps it; 404 afterwards; no more triggers', async () => {
    const s = await setup(t, sink.port);
    const { id } = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], event_triggered_send: { contact_cooldown_interval: 0 } });
    await s.a.post('/email/contacts/upsert', { email: 'queued@example.com', first_name: 'Q' });
    // Decide only (the send job is left waiting): what the decider loop does, no job run.
    await drainDecisionsOnly();
    const queued = (await sendLog(t, s.teamId)).filter((r) => r.campaign_id === id);
    assert.equal(queued.length, 1);
    assert.equal(queued[0]!.status, 'queued');

    const before = sink.messages.length;
    const res = await del(s.key, `/email/campaigns/${id}`);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { ok: true, cancelled: 1 });
    await drain(t, { config });
    const after = (await sendLog(t, s.teamId)).filter((r) => r.id === queued[0]!.id);
    assert.equal(after[0]!.status, 'cancelled');
    assert.equal(after[0]!.last_error, 'campaign deleted');
    assert.equal(after[0]!.campaign_id, id, 'the log keeps its campaign for stats');
    assert.equal(sink.messages.length, before, 'nothing was sent');

    assert.equal((await s.a.get(`/email/campaigns/${id}`)).statusCode, 404);
    assert.ok(!(await s.a.get('/email/campaigns')).json().campaigns.some((c: { id: string }) => c.id === id));
    assert.equal((await del(s.key, `/email/campaigns/${id}`)).statusCode, 404, 'deleting twice is 404');
    assert.equal((await patch(s.key, `/email/campaigns/${id}`, { name: 'x' })).statusCode, 404);
    assert.equal((await s.a.post(`/email/campaigns/${id}/start`)).statusCode, 404);
    // Soft: the row stays for the log. New triggers decide nothing for it.
    const row = await t.database.db.selectFrom('campaigns').select('deleted_at').where('id', '=', id).executeTakeFirstOrThrow();
    assert.ok(row.deleted_at);
    await s.a.post('/email/contacts/upsert', { email: 'queued@example.com', first_name: 'Again' });
    await drain(t, { config });
    assert.equal((await sendLog(t, s.teamId)).filter((r) => r.campaign_id === id).length, 1);
    // The template it used can now be deleted (a deleted campaign does not hold it).
    assert.equal((await del(s.key, `/email/templates/${s.templateId}`)).statusCode, 200);
  });

  test('DELETE campaign with no message: the row is gone', async () => {
    const s = await setup(t, sink.port);
    const { id } = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId] });
    const res = await del(s.key, `/email/campaigns/${id}`);
    assert.deepEqual(res.json(), { ok: true, cancelled: 0 });
    const rows = await t.database.db.selectFrom('campaigns').select('id').where('id', '=', id).execute();
    assert.equal(rows.length, 0);
  });

  test('a message of a campaign deleted after it was queued, and not cancelled by the delete, is cancelled at send', async () => {
    const s = await setup(t, sink.port);
    const { id } = await createCampaign(s.a, { template_ids: [s.templateId], mail_account_ids: [s.accountId], event_triggered_send: { contact_cooldown_interval: 0 } });
    await s.a.post('/email/contacts/upsert', { email: 'late@example.com', first_name: 'L' });
    await drainDecisionsOnly();
    const queued = (await sendLog(t, s.teamId)).filter((r) => r.campaign_id === id);
    assert.equal(queued.length, 1);
    assert.equal(queued[0]!.status, 'queued');
    // As a decision committed just after the delete's cancel would leave it: queued, its campaign deleted.
    await t.database.db.updateTable('campaigns').set({ deleted_at: new Date() }).where('id', '=', id).execute();
    const before = sink.messages.length;
    await drain(t, { config });
    const after = (await sendLog(t, s.teamId)).find((r) => r.id === queued[0]!.id)!;
    assert.equal(after.status, 'cancelled');
    assert.equal(after.last_error, 'campaign deleted');
    assert.equal(sink.messages.length, before, 'nothing was sent');
  });

  /** Decides the waiting trigger events, as the decider loop would: decisions made and messages queued, none sent. */
  async function drainDecisionsOnly(): Promise<void> {
    const { decideAllWaiting } = await import('../engine/fixtures.ts');
    const { decideOptions } = await import('../../src/tasks.ts');
    await decideAllWaiting(t.database.db, decideOptions({ db: t.database.db, config: testConfig({ sendRetryDelays: [0, 0] }) }));
  }
});
