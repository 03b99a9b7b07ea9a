// The dashboard in a real browser: sign in with the keyboard, create an API key
// and use it against the public API from this test, revoke it and see the API
// refuse it, CSRF and team isolation, and a screenshot of each main page
// (test-results/, an artifact of the run).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import pino from 'pino';
import { startWorker, type WorkerHandle } from '../../src/background.ts';
import { buildTestApp, makeTeam, testConfig, type TestApp } from '../helpers.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';
import { decodeHeader, parseMessage, startCaptureSink, type CaptureSink } from '../engine/sink.ts';
import { insertMailAccount, insertTemplate } from '../campaigns/fixtures.ts';
import { browserSkipReason, launch, SCREENSHOTS } from './browser.ts';
import { makeUserTeam, PASSWORD } from './session.ts';

const skip = browserSkipReason();
if (skip) console.log(`# ${skip}`);

let t: TestApp;
let worker: WorkerHandle;
let receiver: Receiver;
let sink: CaptureSink;
let me: { teamId: string; key: string; email: string };
let browser: Browser;
let page: Page;
let base: string;

before(async () => {
  if (skip) return;
  // Webhook targets on 127.0.0.1 are allowed only because the operator setting says so.
  const config = { signInRateLimitPerMinute: 1000, allowedPrivateTargets: ['127.0.0.1'] };
  t = await buildTestApp({ config });
  // A real worker: event processing and webhook delivery, as `npm start` runs it.
  worker = await startWorker(t.database.pool, { db: t.database.db, config: testConfig(config) }, pino({ level: 'silent' }));
  receiver = await startReceiver();
  sink = await startCaptureSink();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
});
after(async () => {
  await browser?.close();
  await worker?.stop();
  await receiver?.close();
  await sink?.close();
  await t?.close();
});

const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `dashboard-${name}.png`), fullPage: true });
const ping = (key: string) => fetch(`${base}/public/v1/ping`, { headers: { 'x-api-key': key } });

test('dashboard in Chromium: sign-in, API keys used and revoked, pages, CSRF, isolation', { skip, timeout: 120_000 }, async () => {
  const db = t.database.db;
  me = await makeUserTeam(db, 'Browser team');
  await t.app.inject({
    method: 'POST',
    url: '/public/v1/email/contacts/bulk-upsert',
    headers: { 'x-api-key': me.key },
    payload: { contacts: [{ email: 'ada@example.com', first_name: 'Ada', custom_str_1: 'gold' }, { email: 'bob@example.com', first_name: 'Bob' }], tags: ['vip'] },
  });
  const templateId = await insertTemplate(db, me.teamId);
  const campaign = await t.app.inject({
    method: 'POST',
    url: '/public/v1/email/campaigns',
    headers: { 'x-api-key': me.key },
    payload: { name: 'Welcome series', template_ids: [templateId], mail_account_ids: [await insertMailAccount(db, me.teamId)], events: ['contact.saved'] },
  });
  assert.equal(campaign.statusCode, 201);

  // Sign in with the keyboard only: the e-mail field has focus on load.
  await page.goto(`${base}/`);
  assert.equal(new URL(page.url()).pathname, '/sign-in');
  await shot('sign-in');
  await page.keyboard.type(me.email);
  await page.keyboard.press('Tab');
  await page.keyboard.type(PASSWORD);
  await page.keyboard.press('Enter');
  // Home is the overview; the navigation leads on.
  await page.waitForURL(`${base}/`);
  assert.ok(await page.getByText(me.email).isVisible());
  assert.ok(await page.getByRole('heading', { name: 'Overview' }).isVisible());
  await shot('overview');
  await page.getByRole('link', { name: 'Campaigns', exact: true }).click();
  await page.waitForURL(`${base}/campaigns`);
  await shot('campaigns');
  // Stop and start from the list.
  await page.getByRole('button', { name: 'Stop Welcome series' }).click();
  await page.waitForURL(/done=stopped/);
  await page.getByRole('button', { name: 'Start Welcome series' }).click();
  await page.waitForURL(/done=started/);

  // Developer Tools → API Keys: create, shown once, works against the API.
  await page.getByRole('link', { name: /API Keys/ }).click();
  await page.getByLabel('Name').fill('Browser key');
  await page.getByRole('button', { name: 'Create key' }).click();
  const key = await page.getByLabel('API key').inputValue();
  assert.match(key, /^plv_live_/);
  assert.ok(await page.getByText('It will not be shown again').isVisible());
  await shot('api-key-created');
  assert.equal((await ping(key)).status, 200);
  await page.goto(`${base}/developer/api-keys`);
  assert.equal(await page.getByLabel('API key').count(), 0, 'not shown again');

  // Revoke with confirmation; the API refuses the key at once.
  await page.getByRole('link', { name: 'Revoke key Browser key' }).click();
  await shot('api-key-revoke');
  await page.getByRole('button', { name: 'Revoke key' }).click();
  await page.waitForURL(/done=revoked/);
  assert.equal((await ping(key)).status, 401);
  await shot('api-keys');

  // Contacts: search by e-mail prefix, open one, preview a template for it.
  await page.getByRole('link', { name: 'Contacts' }).click();
  await page.getByLabel('E-mail starts with').fill('ad');
  await page.keyboard.press('Enter');
  await page.waitForURL(/q=ad/);
  assert.equal(await page.getByRole('link', { name: 'bob@example.com' }).count(), 0);
  await shot('contacts');
  await page.getByRole('link', { name: 'ada@example.com' }).click();
  assert.ok(await page.getByText('gold').isVisible());
  await shot('contact');
  await page.goto(`${base}/templates`);
  await shot('templates');
  await page.getByRole('link', { name: /Preview/ }).first().click();
  await page.getByLabel(/^Contact \(e-mail/).fill('ada@example.com');
  await page.getByRole('button', { name: 'Preview' }).click();
  const frame = page.frameLocator('iframe.preview');
  assert.match(await frame.locator('body').innerText(), /Hi Ada/);
  await shot('template-preview');

  // CSRF: a form post with this browser's session but no token is refused.
  const forged = await page.request.post(`${base}/developer/api-keys`, { form: { name: 'forged' }, maxRedirects: 0 });
  assert.equal(forged.status(), 403);

  // Another team's pages are 404.
  const other = await makeTeam(db, 'Other team');
  const theirs = await db.insertInto('contacts').values({ team_id: other.teamId, email: 'theirs@example.com' }).returning('id').executeTakeFirstOrThrow();
  const theirTemplate = await insertTemplate(db, other.teamId);
  for (const url of [`/contacts/${theirs.id}`, `/templates/${theirTemplate}`, `/developer/api-keys/${other.keyId}/revoke`]) {
    const res = await page.goto(`${base}${url}`);
    assert.equal(res?.status(), 404, url);
  }
  await shot('not-found');
  assert.ok(templateId);
});

test('webhooks in Chromium: create, event delivered and logged, resend; locked webhook', { skip, timeout: 120_000 }, async () => {
  const db = t.database.db;
  await page.goto(`${base}/webhooks`);
  await page.getByRole('link', { name: 'Create a webhook' }).click();
  await page.getByLabel('URL (https)').fill(receiver.url);
  await page.getByLabel('email.contact.saved').check();
  await page.getByLabel('Description (optional)').fill('CRM sync');
  await shot('webhook-new');
  await page.getByRole('button', { name: 'Create webhook' }).click();
  await page.waitForURL(/\/webhooks\/[0-9a-f-]{36}\?done=created/);
  const webhookPath = new URL(page.url()).pathname;

  // An event: saving a contact through the API emits email.contact.saved.
  const saved = await fetch(`${base}/public/v1/email/contacts/upsert`, {
    method: 'POST',
    headers: { 'x-api-key': me.key, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'new.customer@example.com', first_name: 'Newt' }),
  });
  assert.ok(saved.status < 300);
  const [first] = await receiver.waitFor(1, 30_000);
  assert.equal(first.body.event, 'email.contact.saved');

  // The receiver has answered; the attempt's result is written just after: reload until it shows.
  const row = page.locator('tr.delivery').first();
  for (let i = 0; i < 50; i++) {
    await page.goto(`${base}${webhookPath}`);
    if (/success/.test(await row.innerText())) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.match(await row.innerText(), /email\.contact\.saved[\s\S]*success[\s\S]*200/);
  await row.getByText('Attempts, payload, response').click();
  assert.match(await row.locator('pre').first().innerText(), /new\.customer@example\.com/);
  await page.getByRole('button', { name: 'Show secret' }).click();
  assert.match(await page.getByLabel('Signing secret').inputValue(), /\S{20,}/);
  await shot('webhook-deliveries');

  // Resend: the same envelope (same id) arrives again.
  await page.goto(`${base}${webhookPath}`);
  await page.locator('tr.delivery').first().getByRole('button', { name: /Resend/ }).click();
  await page.waitForURL(/done=resent/);
  const received = await receiver.waitFor(2, 30_000);
  assert.equal(received[1].body.id, first.body.id);

  // A locked webhook (made by an integration through the API): owner shown, no edit or delete.
  const locked = await fetch(`${base}/public/v1/webhooks`, {
    method: 'POST',
    headers: { 'x-api-key': me.key, 'content-type': 'application/json' },
    body: JSON.stringify({ url: receiver.url, events: ['email.sent'], source: 'n8n' }),
  }).then((r) => r.json() as Promise<{ webhook: { id: string } }>);
  await page.goto(`${base}/webhooks/${locked.webhook.id}`);
  assert.ok(await page.getByText('managed by n8n').isVisible());
  assert.equal(await page.getByRole('link', { name: 'Edit' }).count(), 0);
  assert.equal(await page.getByRole('link', { name: 'Delete' }).count(), 0);
  await shot('webhook-locked');
  const csrf = await page.locator('input[name=_csrf]').first().inputValue();
  const forged = await page.request.post(`${base}/webhooks/${locked.webhook.id}/edit`, {
    form: { _csrf: csrf, url: 'https://attacker.example.com/', events: 'email.sent' },
    maxRedirects: 0,
  });
  assert.equal(forged.status(), 403);
  const row2 = await db.selectFrom('webhooks').select('url').where('id', '=', locked.webhook.id).executeTakeFirstOrThrow();
  assert.equal(row2.url, receiver.url);
  await page.goto(`${base}/webhooks`);
  await shot('webhooks');
});

test('create and edit in Chromium: a template with its live preview, a mail account checked against SMTP, a campaign; an API event; the sent e-mail on the campaign page; the edited template and campaign send the next one', { skip, timeout: 180_000 }, async () => {
  // Template: the preview follows the typing (no Preview click), with sample event data.
  await page.goto(`${base}/templates`);
  await page.getByRole('link', { name: 'Create a template' }).click();
  await page.getByLabel('Name', { exact: true }).fill('Browser welcome mail');
  await page.getByLabel('Subject (Liquid, one line)').fill('Welcome {{ contact.first_name | default: "friend" }}');
  await page.getByLabel('HTML', { exact: true }).fill('<p>Hello {{ contact.first_name | default: "friend" }}, your plan: {{ event.payload.plan | default: "none" }}</p>');
  await page.getByLabel(/^Event payload/).fill('{"plan": "Gold"}');
  const frame = page.frameLocator('iframe.preview');
  await frame.locator('body').getByText('your plan: Gold').waitFor({ timeout: 15_000 });
  await shot('template-editor');
  await page.getByRole('button', { name: 'Create template' }).click();
  await page.waitForURL(/\/templates\/[0-9a-f-]{36}\?done=created/);

  // Mail account: the SMTP sink on 127.0.0.1 (allowed by ALLOWED_PRIVATE_TARGETS here), checked before saving.
  await page.getByRole('link', { name: 'Mail accounts' }).click();
  await page.getByRole('link', { name: 'Add a mail account' }).click();
  await page.getByLabel('From e-mail').fill('hello@browser.example');
  await page.getByLabel('From name (optional)').fill('Browser Shop');
  await page.getByLabel(/^SMTP server/).fill('127.0.0.1');
  await page.getByLabel('Port', { exact: true }).fill(String(sink.port));
  await page.getByLabel('Security', { exact: true }).selectOption('none');
  assert.ok(await page.getByLabel(/Check the connection and the login/).isChecked(), 'the check is on by default');
  await shot('mail-account-new');
  await page.getByRole('button', { name: 'Save mail account' }).click();
  await page.waitForURL(/\/mail-accounts\?done=created_verified/);
  assert.ok(await page.getByText('the server accepted the connection and the login').isVisible());
  await shot('mail-accounts');

  // Campaign: on contact.saved, with that template and account.
  await page.getByRole('link', { name: 'Campaigns' }).click();
  await page.getByRole('link', { name: 'Create a campaign' }).click();
  await page.getByLabel('Name', { exact: true }).fill('Browser onboarding');
  assert.ok(await page.getByLabel('contact.saved').isChecked());
  await page.getByLabel('Browser welcome mail').check();
  await page.getByLabel('hello@browser.example').check();
  await shot('campaign-new');
  await page.getByRole('button', { name: 'Create campaign' }).click();
  await page.waitForURL(/\/campaigns\/[0-9a-f-]{36}\?done=created/);
  const campaignPath = new URL(page.url()).pathname;

  // The event, through the public API.
  const fired = await fetch(`${base}/public/v1/email/events`, {
    method: 'POST',
    headers: { 'x-api-key': me.key, 'content-type': 'application/json' },
    body: JSON.stringify({ event_name: 'contact.saved', email: 'newt@browser.example', payload: { plan: 'Gold' } }),
  });
  assert.equal(fired.status, 202, await fired.text());
  const mail = (await sink.waitFor(1, 60_000)).find((m) => m.to.includes('newt@browser.example'));
  assert.ok(mail, 'the campaign e-mail reached the SMTP server');
  const parsed = parseMessage(mail.raw);
  assert.equal(decodeHeader(parsed.headers.get('subject') ?? ''), 'Welcome friend');
  assert.match(parsed.html, /your plan: Gold/);

  // The campaign page shows it sent (the status is written just after SMTP accepts: reload until it shows).
  const send = page.locator('tr.campaign-send').filter({ hasText: 'newt@browser.example' });
  for (let i = 0; i < 50; i++) {
    await page.goto(`${base}${campaignPath}`);
    if ((await send.count()) > 0 && /\bsent\b/.test(await send.innerText())) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.match(await send.innerText(), /newt@browser\.example[\s\S]*Welcome friend[\s\S]*sent/);
  const decision = page.locator('tr.campaign-decision').filter({ hasText: 'newt@browser.example' });
  assert.match(await decision.innerText(), /contact\.saved[\s\S]*sent/);
  await shot('campaign');
  // The message's own page, from the campaign page.
  await send.getByRole('link', { name: 'newt@browser.example' }).click();
  await page.waitForURL(/\/emails\/[0-9a-f-]{36}/);
  assert.ok(await page.getByText('Welcome friend').first().isVisible());

  // Edit the template (a new version) and the campaign; the next event sends the new version.
  await page.goto(`${base}/templates`);
  await page.getByRole('link', { name: 'Edit Browser welcome mail' }).click();
  await page.getByLabel('Subject (Liquid, one line)').fill('Welcome aboard, {{ contact.first_name | default: "friend" }}');
  await page.getByRole('button', { name: 'Save template' }).click();
  await page.waitForURL(/\/templates\/[0-9a-f-]{36}\?done=saved/);
  await page.goto(`${base}${campaignPath}`);
  await page.getByRole('link', { name: 'Edit Browser onboarding' }).click();
  await page.getByLabel('Name', { exact: true }).fill('Browser onboarding v2');
  await page.getByLabel('lead.created').check();
  await shot('campaign-edit');
  await page.getByRole('button', { name: 'Save campaign' }).click();
  await page.waitForURL(/done=saved/);
  assert.ok(await page.getByRole('heading', { name: 'Browser onboarding v2' }).isVisible());
  assert.match(await page.locator('dl.facts').innerText(), /contact\.saved, lead\.created/);
  const lead = await fetch(`${base}/public/v1/email/events`, {
    method: 'POST',
    headers: { 'x-api-key': me.key, 'content-type': 'application/json' },
    body: JSON.stringify({ event_name: 'lead.created', email: 'lena@browser.example', payload: { plan: 'Silver' } }),
  });
  assert.equal(lead.status, 202, await lead.text());
  const deadline = Date.now() + 60_000;
  let second;
  while (!(second = sink.messages.find((m) => m.to.includes('lena@browser.example'))) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  assert.ok(second, 'the lead.created event sent the e-mail');
  assert.equal(decodeHeader(parseMessage(second.raw).headers.get('subject') ?? ''), 'Welcome aboard, friend');
  const leadSend = page.locator('tr.campaign-send').filter({ hasText: 'lena@browser.example' });
  for (let i = 0; i < 50; i++) {
    await page.goto(`${base}${campaignPath}`);
    if ((await leadSend.count()) > 0 && /\bsent\b/.test(await leadSend.innerText())) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.match(await leadSend.innerText(), /Welcome aboard, friend[\s\S]*sent/);
});

test('at 390 px wide (a phone) no page scrolls sideways: the nav wraps, tables scroll in their box', { skip, timeout: 180_000 }, async () => {
  const db = t.database.db;
  const team = await makeUserTeam(db, 'A team with a rather long name for a narrow screen');
  // Wide content: long addresses, many tags, a long campaign name, a long webhook URL.
  await t.app.inject({
    method: 'POST', url: '/public/v1/email/contacts/bulk-upsert', headers: { 'x-api-key': team.key },
    payload: {
      contacts: [{ email: `a.very.long.local.part.that.does.not.fit.anywhere@${'sub.'.repeat(6)}example.com`, first_name: 'Ada', last_name: 'Lovelace-Byron-King-Noel' }],
      tags: Array.from({ length: 8 }, (_, i) => `segment-number-${i}`),
    },
  });
  const contact = await db.selectFrom('contacts').select('id').where('team_id', '=', team.teamId).executeTakeFirstOrThrow();
  const templateId = await insertTemplate(db, team.teamId);
  await t.app.inject({
    method: 'POST', url: '/public/v1/email/campaigns', headers: { 'x-api-key': team.key },
    payload: { name: 'Spring newsletter with a name far longer than a phone is wide', template_ids: [templateId], mail_account_ids: [await insertMailAccount(db, team.teamId)], events: ['contact.saved', 'lead.created', 'sale.created'] },
  });
  await t.app.inject({
    method: 'POST', url: '/public/v1/webhooks', headers: { 'x-api-key': team.key },
    payload: { url: `${receiver.url}/${'deep/'.repeat(12)}hook`, events: ['email.sent', 'email.opened', 'email.clicked', 'email.contact.saved'] },
  });

  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  const p = await phone.newPage();
  try {
    await p.goto(`${base}/sign-in`);
    await p.getByLabel('E-mail').fill(team.email);
    await p.getByLabel('Password').fill(PASSWORD);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.waitForURL(`${base}/`);
    const webhook = await db.selectFrom('webhooks').select('id').where('team_id', '=', team.teamId).executeTakeFirstOrThrow();
    const pages: [string, string][] = [
      ['overview', '/'], ['campaigns', '/campaigns'], ['emails', '/emails'], ['contacts', '/contacts'], ['contact', `/contacts/${contact.id}`],
      ['contact-timeline', `/contacts/${contact.id}/timeline`],
      ['templates', '/templates'], ['template', `/templates/${templateId}`], ['webhooks', '/webhooks'], ['webhook', `/webhooks/${webhook.id}`],
      ['api-keys', '/developer/api-keys'], ['team-settings', '/settings/team'], ['not-found', '/no/such/page'],
      ['mail-accounts', '/mail-accounts'], ['suppressions', '/suppressions'], ['campaign-new', '/campaigns/new'], ['template-new', '/templates/new'],
    ];
    const overflow: string[] = [];
    for (const [name, url] of pages) {
      await p.goto(`${base}${url}`);
      const widths = await p.evaluate<{ page: number; body: number }>('({ page: document.documentElement.scrollWidth, body: document.body.scrollWidth })');
      if (widths.page > 390 || widths.body > 390) {
        // Name the outermost elements that stick out, for the message.
        const culprits = await p.evaluate<string[]>(`[...document.querySelectorAll('body *')]
          .filter((el) => el.getBoundingClientRect().right > 391 && el.parentElement.getBoundingClientRect().right <= 391)
          .slice(0, 5).map((el) => el.tagName.toLowerCase() + (el.className ? '.' + el.className : '') + ' ' + Math.round(el.getBoundingClientRect().right))`);
        overflow.push(`${url}: ${widths.page} px (${culprits.join(', ')})`);
      }
      await p.screenshot({ path: join(SCREENSHOTS, `dashboard-390-${name}.png`), fullPage: true });
    }
    assert.deepEqual(overflow, [], 'pages wider than 390 px');
    // The navigation wraps inside the screen: every link is on screen, none cut off.
    await p.goto(`${base}/`);
    const boxes = await p.locator('nav[aria-label="Main"] a').evaluateAll((links) => links.map((a) => a.getBoundingClientRect().right));
    assert.ok(boxes.length >= 8);
    for (const right of boxes) assert.ok(right <= 390, `a nav link ends at ${right} px`);
    // A wide table scrolls inside its own box rather than widening the page.
    await p.goto(`${base}/contacts`);
    const table = await p.locator('table').first().evaluate((el) => ({ client: el.clientWidth, overflow: (globalThis as unknown as { getComputedStyle(e: unknown): { overflowX: string } }).getComputedStyle(el).overflowX }));
    assert.equal(table.overflow, 'auto');
    assert.ok(table.client <= 390, `the table box is ${table.client} px`);
  } finally {
    await phone.close();
  }
});
