// Puppeteer clients of one relay, each page going to the same host at
// once, while the Go test stops the relay (SIGTERM): what each goto got of
// a relay that stops fail-closed (stop_test.go). CLIENTS connections to
// RELAY (browserURL), each with PAGES pages it creates (browser.newPage():
// in Chromium's default context, or the connection's own page in
// Lightpanda); then every page goes, all at once, to
// BASE/page?run=RUN&i=N, N counting the pages of all clients from 0.
//
// It prints two JSON lines on stdout. The first, once every page exists:
// {"targets": [the target id of each page, by N]}. The second, once every
// goto returned, threw, or was left behind by its client's disconnection
// (GRACE ms after it, 1500 by default): {"gotos": [...]}, a goto each by
// N: i, url, start (Date.now() when it was asked for), took (ms until it
// returned or threw), status, retryAfter and throttle (the Retry-After
// and X-Cdp-Throttle headers of its answer), error (the first line of
// what it threw), disconnectedAt (Date.now() when its client's connection
// ended, 0 while it had not).
//
// env: RELAY, BASE, RUN, CLIENTS, PAGES; GRACE, TIMEOUT (each goto's, ms).
import puppeteer from 'puppeteer-core';
import { env, sleep, timedGoto } from './lib.mjs';

const relay = env('RELAY');
const base = env('BASE');
const run = env('RUN');
const clients = Number(env('CLIENTS'));
const perClient = Number(env('PAGES'));
const grace = Number(process.env.GRACE || 1500);
const timeout = Number(process.env.TIMEOUT || 20000);

const conns = [];
for (let c = 0; c < clients; c++) {
  const browser = await puppeteer.connect({ browserURL: relay, defaultViewport: null, protocolTimeout: 30000 });
  const conn = { browser, gone: 0 };
  conn.disconnected = new Promise((resolve) =>
    browser.once('disconnected', () => {
      conn.gone = Date.now();
      resolve();
    }),
  );
  conns.push(conn);
}
const pages = [];
for (const conn of conns) {
  for (let k = 0; k < perClient; k++) pages.push({ conn, page: await conn.browser.newPage() });
}
console.log(JSON.stringify({ targets: pages.map(({ page }) => page.target()._targetId) }));

const gotos = await Promise.all(
  pages.map(async ({ conn, page }, i) => {
    const url = `${base}/page?run=${run}&i=${i}`;
    const g = { i, url, start: Date.now() };
    const left = conn.disconnected.then(() => sleep(grace)).then(() => 'left');
    const done = timedGoto(page, url, g, timeout).then(() => 'done');
    if ((await Promise.race([done, left])) === 'left') {
      g.took = Date.now() - g.start;
      g.error = `goto still pending ${grace} ms after the client was disconnected`;
    }
    g.disconnectedAt = conn.gone;
    if (process.env.E2E_TRACE) console.error(JSON.stringify(g));
    return { ...g };
  }),
);
console.log(JSON.stringify({ gotos }));
for (const { browser } of conns) {
  try {
    await Promise.race([browser.disconnect(), sleep(500)]);
  } catch {}
}
process.exit(0);
