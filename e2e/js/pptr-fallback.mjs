// Page.navigate and Page.reload through Puppeteer, one after another to
// one host: with the relay's fallback (navigations held in the client's
// stream) these are the navigations it sees.
import puppeteer from 'puppeteer-core';
import { env, stepLog, warm } from './lib.mjs';

const relay = env('RELAY');
const base = env('BASE');
const run = env('RUN');
const page = (step) => `${base}/page?` + new URLSearchParams({ run, s: String(step) });

const browser = await puppeteer.connect({ browserURL: relay, defaultViewport: null, protocolTimeout: 30000 });
const ctx = await browser.createBrowserContext();
const log = stepLog();
try {
  const p = await ctx.newPage();
  await log.run('warm', () => warm(p, base));
  await log.run('goto', () => p.goto(page(1)));
  await log.run('goto', () => p.goto(page(2)));
  await log.run('reload', () => p.reload());
  await log.run('goto', () => p.goto(page(3)));
  await log.run('reload', () => p.reload());
} finally {
  await ctx.close().catch(() => {});
  await browser.disconnect();
}
console.log(JSON.stringify({ steps: log.steps }));
