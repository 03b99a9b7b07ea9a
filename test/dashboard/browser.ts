// Browser-test set-up: Debian's Chromium driven by playwright-core (never a
// downloaded browser). Without Chromium the tests skip with a message, except
// in CI (CI or PLOVER_REQUIRE_BROWSER set), where a missing browser fails.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const SCREENSHOTS = join(import.meta.dirname, '..', '..', 'test-results');

/** undefined when the browser tests can run; else why they are skipped. Throws in CI. */
export function browserSkipReason(): string | undefined {
  if (existsSync(CHROMIUM)) return undefined;
  const required = process.env.PLOVER_REQUIRE_BROWSER === '1' || process.env.CI === 'true';
  const message = `no Chromium at ${CHROMIUM}: install it with \`apt-get install -y chromium\` (or set CHROMIUM_PATH)`;
  if (required) throw new Error(`browser tests are required here (CI / PLOVER_REQUIRE_BROWSER) but there is ${message}`);
  return `browser tests skipped: ${message}`;
}

export async function launch(): Promise<Browser> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  // --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}
