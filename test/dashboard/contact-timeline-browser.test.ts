// The contact timeline in Chromium: from the contact page to its timeline,
// where a skipped campaign decision shows its reason in words and an open its
// bot verdict. Screenshot in test-results/.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers.ts';
import { seedContactHistory } from '../contacts/timeline-fixtures.ts';
import { browserSkipReason, launch, SCREENSHOTS } from './browser.ts';
import { makeUserTeam, PASSWORD } from './session.ts';

const skip = browserSkipReason();
if (skip) console.log(`# ${skip}`);

let t: TestApp;
let browser: Browser;
let page: Page;
let base: string;

before(async () => {
  if (skip) return;
  t = await buildTestApp({ config: { signInRateLimitPerMinute: 1000 } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
});
after(async () => {
  await browser?.close();
  await t?.close();
});

test('contact timeline in Chromium: a decision\'s reason in words and the bot verdict', { skip, timeout: 120_000 }, async () => {
  const me = await makeUserTeam(t.database.db, 'Timeline browser team');
  const s = await seedContactHistory(t.app, t.database.db, me.teamId, me.key);

  await page.goto(`${base}/sign-in`);
  await page.getByLabel('E-mail').fill(me.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: /Sign in/ }).click();
  await page.waitForURL(`${base}/`);

  await page.goto(`${base}/contacts/${s.contactId}`);
  await page.getByRole('link', { name: 'Timeline', exact: true }).click();
  await page.waitForURL(`${base}/contacts/${s.contactId}/timeline`);
  await page.getByRole('link', { name: 'Oldest first' }).click();
  await page.waitForURL(/order=asc/);

  const skipped = page.locator('#timeline tr.item-decision', { hasText: 'Not sent' });
  assert.equal(await skipped.count(), 1);
  const text = await skipped.innerText();
  assert.match(text, /Not sent by campaign “Welcome series”: the contact got this campaign within the cooldown/);
  assert.match(text, /reason: cooldown/);
  const open = page.locator('#timeline tr.item-opened');
  assert.ok(await open.getByText('bot', { exact: true }).isVisible(), 'the verdict badge');
  assert.match(await open.innerText(), /apple_mpp_proxy/);
  await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-contact-timeline.png'), fullPage: true });
});
