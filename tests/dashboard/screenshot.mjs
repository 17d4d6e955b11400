// screenshot.mjs - a full-page screenshot of a running dashboard with Debian's headless
// Chromium (how docs/dashboard.png is made: `make demo`, let it run a minute, then
// `node tests/dashboard/screenshot.mjs http://127.0.0.1:8750/ docs/dashboard.png`).
import {mkdtempSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {chromium} from 'playwright-core';

const [url, out] = process.argv.slice(2);
if (!url || !out) {
  console.error('usage: node screenshot.mjs URL OUT.png');
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), 'sluice-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: {width: 1280, height: 1000},
});
try {
  const page = context.pages()[0] || await context.newPage();
  await page.goto(url);
  await page.waitForTimeout(30000); // the charts fill from the page's own polls and events
  await page.screenshot({path: out, fullPage: true});
  console.log('screenshot: ' + out);
} finally {
  await context.close();
  rmSync(profile, {recursive: true, force: true});
}
