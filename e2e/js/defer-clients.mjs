// What Puppeteer or Playwright (CLIENT) sees of a navigation the relay
// defers (--max-wait), beside the same client's goto of a 429 the site
// makes itself. Through the relay at RELAY, a page goes to
// DEFERRED/status?code=429&ra=10 (the site's 429, which moves the host's
// next slot 10 s ahead), then N times: a goto of DEFERRED/page (the relay
// defers it) and one of BASELINE/status?code=429&ra=10 (a host the relay
// never holds: the site's own 429). With LP=1 (Lightpanda: one page per
// connection, no browser contexts of its own) the page is the
// connection's.
//
// It prints one JSON array, a goto each, in the order they were asked
// for: kind (first, deferred or baseline), i (from 0, the first), start
// (Date.now() when it was asked for), took (ms until goto returned or
// threw), status, retryAfter and throttle (the Retry-After and
// X-Cdp-Throttle headers of the response goto returned), error (the
// first line of what it threw).
//
// env: CLIENT, RELAY, DEFERRED, BASELINE, RUN, N; LP.
import puppeteer from 'puppeteer-core';
import { chromium } from 'playwright-core';
import { env, timedGoto } from './lib.mjs';

const client = env('CLIENT');
const relay = env('RELAY');
const deferredBase = env('DEFERRED');
const baselineBase = env('BASELINE');
const run = env('RUN');
const n = Number(env('N'));
const lp = !!process.env.LP;

let page, close;
if (client === 'puppeteer') {
  const browser = await puppeteer.connect({ browserURL: relay, defaultViewport: null, protocolTimeout: 60000 });
  const ctx = lp ? null : await browser.createBrowserContext();
  page = lp ? await browser.newPage() : await ctx.newPage();
  close = async () => {
    if (ctx) await ctx.close();
    await browser.disconnect();
  };
} else {
  const browser = await chromium.connectOverCDP(relay, { timeout: 60000 });
  const ctx = lp ? (browser.contexts()[0] ?? (await browser.newContext())) : await browser.newContext();
  page = await ctx.newPage();
  close = async () => {
    if (!lp) await ctx.close();
    await browser.close(); // connected over CDP: disconnects, the browser stays
  };
}

const gotos = [];
async function go(kind, i, url) {
  const g = await timedGoto(page, url, { kind, i, start: Date.now() }, 30000);
  gotos.push(g);
  if (process.env.E2E_TRACE) console.error(JSON.stringify(g));
}

try {
  await go('first', 0, `${deferredBase}/status?code=429&ra=10&run=${run}`);
  for (let i = 1; i <= n; i++) {
    await go('deferred', i, `${deferredBase}/page?run=${run}&i=${i}`);
    await go('baseline', i, `${baselineBase}/status?code=429&ra=10&run=${run}&i=${i}`);
  }
} finally {
  await close();
}
console.log(JSON.stringify(gotos));
