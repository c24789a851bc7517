// A client's own interception on Lightpanda, through the relay or not:
// Puppeteer's setRequestInterception or Playwright's route, continuing
// every request and listing them; a page with a script, fetch and XHR, a
// link click and a form. Prints what the client saw.
//
// env: CLIENT (puppeteer or playwright), CDP_URL, BASE, RUN.
import puppeteer from 'puppeteer-core';
import { chromium } from 'playwright-core';
import { env, sleep } from './lib.mjs';

const base = env('BASE');
const run = env('RUN');
const page = (step, extra = {}) => `${base}/page?` + new URLSearchParams({ run, s: String(step), ...extra });
const seen = [];
const strip = (u) => { const x = new URL(u); x.searchParams.delete('run'); return x.pathname + x.search; };
let close, p, nav;
if (env('CLIENT') === 'puppeteer') {
  const browser = await puppeteer.connect({ browserURL: env('CDP_URL') });
  p = await browser.newPage();
  await p.setRequestInterception(true);
  p.on('request', (r) => { seen.push(`${r.resourceType()} ${r.method()} ${strip(r.url())}`); r.continue(); });
  nav = (marker, f) => Promise.all([p.waitForNavigation(), f()]);
  close = () => browser.disconnect();
} else {
  const browser = await chromium.connectOverCDP(env('CDP_URL'));
  const context = browser.contexts()[0] ?? (await browser.newContext());
  p = await context.newPage();
  await p.route('**/*', (route) => { const r = route.request(); seen.push(`${r.resourceType()} ${r.method()} ${strip(r.url())}`); route.continue(); });
  nav = (marker, f) => Promise.all([p.waitForURL((u) => u.href.includes(marker), { waitUntil: 'load' }), f()]);
  close = () => browser.close();
}
await p.goto(page(1, { sub: '1', link: page(2, { form: page(3) }) }));
await sleep(300);
await nav('s=2', () => p.click('#link'));
await nav('s=3', () => p.click('#postbtn'));
await close();
console.log(JSON.stringify({ seen }));
