// Three clients share one Chromium through the relay: A and B with
// Puppeteer, C with Playwright's connectOverCDP. Each opens pages of its
// own; then A ends the way Puppeteer's examples end, with
// browser.close() (Browser.close). With the relay as it comes (MODE
// contain) B and C must go on navigating; with --allow-browser-close
// (MODE allow) the browser exits for all three, and the script records
// how B and C find out. It prints one JSON document for the Go test,
// which checks the browser itself.
//
// env: RELAY, SITE (http://host:port of the test site), MODE, RUN.
import puppeteer from 'puppeteer-core';
import { chromium } from 'playwright-core';
import { env, sleep } from './lib.mjs';

const relay = env('RELAY');
const site = env('SITE');
const mode = env('MODE');
const run = env('RUN');
const url = (who, n) => `${site}/page?` + new URLSearchParams({ run, who, n: String(n) });
const out = { mode };

const a = await puppeteer.connect({ browserURL: relay, protocolTimeout: 30000 });
const b = await puppeteer.connect({ browserURL: relay, protocolTimeout: 30000 });
const c = await chromium.connectOverCDP(relay);
const gone = { a: false, b: false, c: false };
a.on('disconnected', () => { gone.a = true; });
b.on('disconnected', () => { gone.b = true; });
c.on('disconnected', () => { gone.c = true; });

// B and C first: a page each, C's in a context of its own.
const bPage = await b.newPage();
await bPage.goto(url('b', 0));
const cContext = await c.newContext();
const cPage = await cContext.newPage();
await cPage.goto(url('c', 0));

// A: a page in the default context, and a context of its own with two.
const aContext = await a.createBrowserContext();
const aPages = [await a.newPage(), await aContext.newPage(), await aContext.newPage()];
for (const [i, p] of aPages.entries()) await p.goto(url('a', i));
out.aContext = aContext.id;

const t0 = Date.now();
try {
  await a.close();
  out.aClose = 'ok';
} catch (e) {
  out.aClose = `error: ${e.message}`;
}
out.aCloseMs = Date.now() - t0;
for (const deadline = Date.now() + 5000; !gone.a && Date.now() < deadline; ) await sleep(10);
out.aDisconnected = gone.a && !a.connected;

// B and C go on (or find the browser gone).
const go = async (p, who) => {
  const got = [];
  for (let n = 1; n <= 3; n++) {
    try {
      await p.goto(url(who, n), { timeout: 10000 });
      got.push(await p.evaluate(() => new URLSearchParams(location.search).get('n')));
    } catch (e) {
      got.push(`error: ${e.message.split('\n')[0]}`);
    }
  }
  return got;
};
out.b = await go(bPage, 'b');
out.c = await go(cPage, 'c');
if (mode === 'contain') {
  // And they can still open pages.
  const p = await b.newPage();
  await p.goto(url('b', 'new'));
  out.bNewPage = await p.evaluate(() => new URLSearchParams(location.search).get('n'));
  b.disconnect();
  await c.close();
} else {
  for (const deadline = Date.now() + 5000; !(gone.b && gone.c) && Date.now() < deadline; ) await sleep(10);
}
out.bDisconnected = gone.b;
out.cDisconnected = gone.c;
console.log(JSON.stringify(out));
