// Playwright's connectOverCDP against a relay that wants TOKEN (one a query
// must escape), each way a client may carry it: the webSocketDebuggerUrl
// the relay advertises, a ws:// URL with ?token= escaped by hand, the
// relay's http:// URL with ?token=, and the http:// URL with an
// Authorization header. Each way that connects opens a page and loads
// BASE/page?run=RUN&way=NAME. It prints, for each way, "ok" or the error
// it got.
import { chromium } from 'playwright-core';
import { env } from './lib.mjs';

const relay = env('RELAY'); // http://HOST:PORT
const token = env('TOKEN');
const base = env('BASE');
const run = env('RUN');
const ws = relay.replace(/^http/, 'ws');

async function advertised() {
  const res = await fetch(`${relay}/json/version?token=${encodeURIComponent(token)}`);
  if (!res.ok) throw new Error(`/json/version: HTTP ${res.status}`);
  return (await res.json()).webSocketDebuggerUrl;
}

const ways = {
  advertised: async () => [await advertised()],
  'by hand': async () => [`${ws}/?token=${encodeURIComponent(token)}`],
  'http with ?token=': async () => [`${relay}/?token=${encodeURIComponent(token)}`],
  'http with header': async () => [relay, { headers: { Authorization: `Bearer ${token}` } }],
};

const result = {};
for (const [way, args] of Object.entries(ways)) {
  try {
    const [url, opts = {}] = await args();
    const browser = await chromium.connectOverCDP(url, { timeout: 30000, ...opts });
    try {
      const ctx = await browser.newContext();
      const p = await ctx.newPage();
      const res = await p.goto(`${base}/page?` + new URLSearchParams({ run, way }));
      if (res.status() !== 200) throw new Error(`goto: HTTP ${res.status()}`);
      await ctx.close();
    } finally {
      await browser.close(); // connected over CDP: disconnects, the browser stays
    }
    result[way] = 'ok';
  } catch (e) {
    result[way] = String(e?.message ?? e);
  }
}
console.log(JSON.stringify(result));
