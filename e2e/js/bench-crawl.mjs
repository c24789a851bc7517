// A crawl of many pages at once: CLIENTS Puppeteer clients connect to
// CDP_URL (the browser, the floor or the relay), each opens a page and
// loads LOADS pages of SITE_URL one after the other (each with four
// subresources), then closes its page and disconnects. Prints the elapsed
// milliseconds, the loads that succeeded and the errors, as JSON.
//
// env: CDP_URL (http://HOST:PORT), SITE_URL (a page's URL, to which
// &c=CLIENT&k=LOAD is added), CLIENTS, LOADS; WS_URL, when set, is
// connected to instead of what CDP_URL's /json/version names (a byte
// copier in front of Lightpanda, which names its own address there);
// CRAWL_INTERCEPT=1 makes each client intercept its page's requests, as
// a crawler that saves bandwidth does: images aborted, the rest continued.
import puppeteer from 'puppeteer-core';
import { env } from './lib.mjs';

const cdpURL = env('CDP_URL');
const siteURL = env('SITE_URL');
const clients = Number(env('CLIENTS'));
const loads = Number(env('LOADS'));
const wsURL = process.env.WS_URL;
const intercept = process.env.CRAWL_INTERCEPT === '1';

let ok = 0;
const errors = [];

async function client(i) {
  const at = wsURL ? { browserWSEndpoint: wsURL } : { browserURL: cdpURL };
  const browser = await puppeteer.connect({ ...at, protocolTimeout: 600000, defaultViewport: null });
  try {
    const page = await browser.newPage();
    page.setDefaultNavigationTimeout(600000);
    if (intercept) {
      await page.setRequestInterception(true);
      page.on('request', (r) => (r.resourceType() === 'image' ? r.abort() : r.continue()));
    }
    for (let k = 0; k < loads; k++) {
      try {
        const res = await page.goto(`${siteURL}&c=${i}&k=${k}`, { waitUntil: 'load' });
        if (res && res.status() === 200) ok++;
        else errors.push(`client ${i} load ${k}: status ${res && res.status()}`);
      } catch (e) {
        errors.push(`client ${i} load ${k}: ${e.message}`);
      }
    }
    await page.close();
  } finally {
    await browser.disconnect();
  }
}

const started = performance.now();
const results = await Promise.allSettled(Array.from({ length: clients }, (_, i) => client(i)));
const ms = performance.now() - started;
for (const r of results) if (r.status === 'rejected') errors.push(String(r.reason && r.reason.message || r.reason));
console.log(JSON.stringify({ ms, ok, errors: errors.slice(0, 10), failed: errors.length }));
