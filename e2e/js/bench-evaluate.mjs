// The round trip of one CDP message on a real page: a new browser context
// and page, goto a local page, then N `Runtime.evaluate` of `1+1` one
// after another on the page's session (a tenth as many first, at most
// 100, not counted). With SIZE, each evaluates a string of SIZE bytes
// instead, returned by value: a reply of SIZE bytes and more. Prints the
// elapsed milliseconds of the N as JSON.
//
// env: CDP_URL (http://host:port of the browser or the relay), PAGE_URL, N,
// SIZE; WS_URL, when set, is connected to instead (as bench-loop.mjs).
import puppeteer from 'puppeteer-core';

const at = process.env.WS_URL ? { browserWSEndpoint: process.env.WS_URL } : { browserURL: process.env.CDP_URL };
const browser = await puppeteer.connect({ ...at, protocolTimeout: 60000 });
const n = Number(process.env.N || 1000);
const size = Number(process.env.SIZE || 0);
const expression = size ? `'x'.repeat(${size})` : '1+1';
const want = size ? 'x'.repeat(size) : 2;
const context = await browser.createBrowserContext();
const page = await context.newPage();
await page.goto(process.env.PAGE_URL);
const session = await page.createCDPSession();
const evaluate = async () => {
  const r = await session.send('Runtime.evaluate', { expression, returnByValue: true });
  if (r.result.value !== want) throw new Error('evaluate returned ' + JSON.stringify(r).slice(0, 200));
};
for (let i = 0; i < Math.min(100, Math.ceil(n / 10)); i++) await evaluate();
const started = performance.now();
for (let i = 0; i < n; i++) await evaluate();
const ms = performance.now() - started;
await session.detach();
await page.close();
await context.close();
await browser.disconnect();
console.log(JSON.stringify({ ms, n }));
