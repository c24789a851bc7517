// Clients that connect to the relay while another client has pages, and
// look at every page the way Puppeteer and Playwright do when they connect
// (attaching to each, setting each up), without driving any: that must not
// make those pages theirs. With STAY set they stay connected (until the
// process is killed) once they have said what they saw.
//
// env: RELAY, STAY (optional).
import puppeteer from 'puppeteer-core';
import { chromium } from 'playwright-core';
import { env } from './lib.mjs';

const b = await puppeteer.connect({ browserURL: env('RELAY'), protocolTimeout: 30000 });
const pptr = (await b.pages()).map((p) => p.url());
const c = await chromium.connectOverCDP(env('RELAY'));
const pw = c.contexts().flatMap((ctx) => ctx.pages()).map((p) => p.url());
console.log(JSON.stringify({ puppeteer: pptr.length, playwright: pw.length }));
if (process.env.STAY) {
  setInterval(() => {}, 1 << 30);
} else {
  b.disconnect();
  await c.close();
}
