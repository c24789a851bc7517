// Puppeteer against a relay that wants TOKEN (one a query must escape),
// each way a client may carry it: the webSocketDebuggerUrl the relay
// advertises, a ws:// URL with ?token= escaped by hand, a ws:// URL with an
// Authorization header, and browserURL with ?token=. Each way that connects
// opens a page and loads BASE/page?run=RUN&way=NAME. It prints, for each
// way, "ok" or the error it got.
import puppeteer from 'puppeteer-core';
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
  advertised: async () => ({ browserWSEndpoint: await advertised() }),
  'by hand': async () => ({ browserWSEndpoint: `${ws}/?token=${encodeURIComponent(token)}` }),
  header: async () => ({ browserWSEndpoint: `${ws}/`, headers: { Authorization: `Bearer ${token}` } }),
  browserURL: async () => ({ browserURL: `${relay}/?token=${encodeURIComponent(token)}` }),
};

const result = {};
for (const [way, opts] of Object.entries(ways)) {
  try {
    const browser = await puppeteer.connect({ ...(await opts()), defaultViewport: null, protocolTimeout: 30000 });
    try {
      const ctx = await browser.createBrowserContext();
      const p = await ctx.newPage();
      const res = await p.goto(`${base}/page?` + new URLSearchParams({ run, way }));
      if (res.status() !== 200) throw new Error(`goto: HTTP ${res.status()}`);
      await ctx.close();
    } finally {
      await browser.disconnect();
    }
    result[way] = 'ok';
  } catch (e) {
    result[way] = String(e?.message ?? e);
  }
}
console.log(JSON.stringify(result));
