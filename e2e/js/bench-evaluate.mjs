// The round trip of one CDP message on a real page: a new browser context
// and page, goto a local page, then N `Runtime.evaluate` of `1+1` one
// after another on the page's session (100 more first, not counted).
// Prints the elapsed milliseconds of the N as JSON.
//
// env: CDP_URL (http://host:port of the browser or the relay), PAGE_URL, N;
// WS_URL, when set, is connected to instead (as bench-loop.mjs).
import puppeteer from 'puppeteer-core';

const at = process.env.WS_URL ? { browserWSEndpoint: process.env.WS_URL } : { browserURL: process.env.CDP_URL };
const browser = await puppeteer.connect({ ...at, protocolTimeout: 60000 });
const n = Number(process.env.N || 1000);
const context = await browser.createBrowserContext();
const page = await context.newPage();
await page.goto(process.env.PAGE_URL);
const session = await page.createCDPSession();
const evaluate = async () => {
  const r = await session.send('Runtime.evaluate', { expression: '1+1', returnByValue: true });
  if (r.result.value !== 2) throw new Error('evaluate returned ' + JSON.stringify(r));
};
for (let i = 0; i < 100; i++) await evaluate();
const started = performance.now();
for (let i = 0; i < n; i++) await evaluate();
const ms = performance.now() - started;
await session.detach();
await page.close();
await context.close();
await browser.disconnect();
console.log(JSON.stringify({ ms, n }));
