// Puppeteer going to one host again and again, through one relay or
// several, as a crawler does that keeps going whatever it is answered:
// the Go test checks what the web server saw against what each goto
// returned (issue 40: a navigation the relay defers is answered at once
// with its own 429). A page on each relay of RELAYS (comma-separated)
// goes to BASE + PATH_QUERY&i=N INTERVAL ms after its last goto began, or
// as soon as that returned when it is later (no catching up), N counting
// the gotos of all pages together; the pages after the first begin once
// the first made ALONE gotos (0 by default). The very first goto goes to
// BASE + FIRST instead, when FIRST is set. All stop after DURATION ms, or
// once OKS gotos were answered 2xx by the site after the relay deferred
// one (answered its 429, or, with --intercept navigate, failed with its
// errorText), or after GOTOS gotos of all pages together when it is set.
// With LP=1 (Lightpanda: one page per connection, no browser contexts of
// its own) each page is its connection's.
//
// It prints one JSON array, a goto each, in the order they were asked
// for: i, relay (its index in RELAYS), start (Date.now() when it was asked
// for), took (ms until goto returned), status, retryAfter and throttle
// (the Retry-After and X-Cdp-Throttle headers of its answer), error.
//
// env: RELAYS, BASE, PATH_QUERY, INTERVAL, DURATION; FIRST, ALONE, OKS, GOTOS, LP.
import puppeteer from 'puppeteer-core';
import { env, sleep, timedGoto } from './lib.mjs';

const relays = env('RELAYS').split(',');
const base = env('BASE');
const path = env('PATH_QUERY');
const interval = Number(env('INTERVAL'));
const duration = Number(env('DURATION'));
const first = process.env.FIRST || '';
const alone = Number(process.env.ALONE || 0);
const oks = Number(process.env.OKS || 0);
const most = Number(process.env.GOTOS || 0);
const lp = !!process.env.LP;

const opened = [];
const pages = [];
for (const relay of relays) {
  const browser = await puppeteer.connect({ browserURL: relay, defaultViewport: null, protocolTimeout: 60000 });
  const ctx = lp ? null : await browser.createBrowserContext();
  opened.push({ browser, ctx });
  pages.push(lp ? await browser.newPage() : await ctx.newPage());
}

const gotos = [];
const t0 = Date.now();
let n = 0; // gotos asked for, of all pages
let firstDone = 0; // gotos of the first page that returned
let deferred = false;
let okAfter = 0;
const done = () => Date.now() - t0 >= duration || (oks > 0 && okAfter >= oks) || (most > 0 && n >= most);

async function loop(k) {
  while (k > 0 && firstDone < alone && !done()) await sleep(20);
  let last = 0;
  while (!done()) {
    const due = last + interval;
    if (Date.now() < due) await sleep(due - Date.now());
    if (done()) break;
    last = Date.now();
    const i = n++;
    const url = i === 0 && first ? base + first : `${base}${path}&i=${i}`;
    const g = await timedGoto(pages[k], url, { i, relay: k, start: Date.now() }, 45000);
    gotos.push(g);
    if (process.env.E2E_TRACE) console.error(JSON.stringify(g));
    if (k === 0) firstDone++;
    if (g.throttle || /cdp-throttle: 429 deferred/.test(g.error ?? '')) deferred = true;
    else if (deferred && g.status >= 200 && g.status < 300) okAfter++;
  }
}

try {
  await Promise.all(pages.map((_, k) => loop(k)));
} finally {
  for (const { browser, ctx } of opened) {
    if (ctx) await ctx.close();
    await browser.disconnect();
  }
}
gotos.sort((a, b) => a.i - b.i);
console.log(JSON.stringify(gotos));
