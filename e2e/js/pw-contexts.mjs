// RUNS times: a new browser context, a new page, two gotos, close: the
// Playwright crawl that makes Chromium start a renderer for each context.
//
// env: CDP_URL (the relay), PAGE_URL, RUNS.
import { chromium } from 'playwright-core';
import { env } from './lib.mjs';

const browser = await chromium.connectOverCDP(env('CDP_URL'));
const runs = Number(env('RUNS'));
for (let i = 0; i < runs; i++) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${env('PAGE_URL')}&run=${i}&n=1`);
  await page.goto(`${env('PAGE_URL')}&run=${i}&n=2`);
  await context.close();
}
await browser.close();
console.log(JSON.stringify({ runs }));
