// Fleet throughput: CLIENTS clients at once, each connected on its own to
// one of CDP_URLS in turn (a browser, the floor or the relay), each running
// N times the loop of bench-loop.mjs (a new browser context, a new page,
// goto a local page, evaluate, close page and context). Prints the elapsed
// milliseconds and the loops run, as JSON.
//
// env: CDP_URLS (comma-separated http:// or ws:// endpoints), CLIENTS, N,
// PAGE_URL.
import puppeteer from 'puppeteer-core';
import { env } from './lib.mjs';

const urls = env('CDP_URLS').split(',');
const clients = Number(env('CLIENTS'));
const n = Number(env('N'));
const pageURL = env('PAGE_URL');

async function client(i) {
  const url = urls[i % urls.length];
  const browser = await puppeteer.connect(
    url.startsWith('ws') ? { browserWSEndpoint: url, protocolTimeout: 120000 } : { browserURL: url, protocolTimeout: 120000 });
  for (let k = 0; k < n; k++) {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.goto(`${pageURL}?c=${i}&k=${k}`);
    const v = await page.evaluate(() => document.title.length + 1);
    if (v < 1) throw new Error('evaluate returned ' + v);
    await page.close();
    await context.close();
  }
  await browser.disconnect();
}

const started = performance.now();
await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
const ms = performance.now() - started;
console.log(JSON.stringify({ ms, loops: clients * n }));
