// The loop of BENCHMARKS.md (a): N times, a new browser context, a new
// page, goto a local page, evaluate, close page and context. Prints the
// elapsed milliseconds as JSON.
//
// env: CDP_URL (http://host:port of the browser or the relay), PAGE_URL, N;
// WS_URL, when set, is connected to instead of what CDP_URL's
// /json/version names (Lightpanda behind the floor names itself).
import puppeteer from 'puppeteer-core';

const at = process.env.WS_URL ? { browserWSEndpoint: process.env.WS_URL } : { browserURL: process.env.CDP_URL };
const browser = await puppeteer.connect({ ...at, protocolTimeout: 60000 });
const n = Number(process.env.N || 100);
const started = performance.now();
for (let i = 0; i < n; i++) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.goto(`${process.env.PAGE_URL}?i=${i}`);
  const v = await page.evaluate(() => document.title.length + 1);
  if (v < 1) throw new Error('evaluate returned ' + v);
  await page.close();
  await context.close();
}
const ms = performance.now() - started;
await browser.disconnect();
console.log(JSON.stringify({ ms, n }));
