// The Suppressions page in Chromium: reached from the nav, addresses added with
// a reason, searched, removed after the confirm dialog (dismissing it removes
// nothing), the recipient's own entries offered no Remove; the API sees what
// the page did. Screenshot in test-results/.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers.ts';
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

test('suppressions in Chromium: add, search, remove after confirming, the recipient\'s own kept', { skip, timeout: 120_000 }, async () => {
  const me = await makeUserTeam(t.database.db, 'Suppression team');
  const api = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.inject({ method, url: `/public/v1${url}`, headers: { 'x-api-key': me.key }, ...(payload ? { payload } : {}) });
  assert.equal((await api('POST', '/email/contacts/unsubscribe', { email: 'left@example.com' })).statusCode, 200);

  await page.goto(`${base}/sign-in`);
  await page.getByLabel('E-mail').fill(me.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: /Sign in/ }).click();
  await page.waitForURL(`${base}/`);

  await page.getByRole('link', { name: 'Suppressions' }).click();
  await page.waitForURL(`${base}/suppressions`);
  await page.getByLabel(/E-mail addresses/).fill('Typo@Example.com\nblocked@example.com');
  await page.getByLabel('Reason', { exact: true }).first().selectOption('manual');
  await page.getByRole('button', { name: 'Add to the list' }).click();
  await page.waitForURL(/done=added/);
  assert.ok(await page.getByText('The addresses are on the list').isVisible());
  for (const e of ['typo@example.com', 'blocked@example.com', 'left@example.com']) assert.ok(await page.getByRole('cell', { name: e, exact: true }).isVisible(), e);
  assert.ok(await page.getByText('kept: the recipient’s own').isVisible(), 'the unsubscribe has no Remove button');
  await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-suppressions.png'), fullPage: true });

  // Dismissing the dialog removes nothing.
  page.once('dialog', (d) => void d.dismiss());
  await page.getByRole('button', { name: 'Remove typo@example.com' }).click();
  assert.ok(await page.getByRole('cell', { name: 'typo@example.com', exact: true }).isVisible());
  page.once('dialog', (d) => void d.accept());
  await page.getByRole('button', { name: 'Remove typo@example.com' }).click();
  await page.waitForURL(/done=removed/);
  assert.equal(await page.getByRole('cell', { name: 'typo@example.com', exact: true }).count(), 0);

  await page.getByLabel('E-mail starts with').fill('BLO');
  await page.keyboard.press('Enter');
  await page.waitForURL(/q=BLO/);
  assert.ok(await page.getByRole('cell', { name: 'blocked@example.com', exact: true }).isVisible());
  assert.equal(await page.getByRole('cell', { name: 'left@example.com', exact: true }).count(), 0);

  const listed = (await api('GET', '/email/suppressions')).json().suppressions.map((s: any) => [s.email, s.reason]).sort();
  assert.deepEqual(listed, [['blocked@example.com', 'manual'], ['left@example.com', 'unsubscribed']]);
});
