// A long session through the relay, as a crawler keeps one: Puppeteer or
// Playwright (CLIENT) connected for minutes, with idle gaps (IDLE_MS) and
// big messages: a full-page screenshot of a noisy page over 1 MB on
// Chromium (SHOT=1), a 1.5 MB string from the page on Lightpanda (which
// takes no screenshot). Two navigations back to back after each gap: the
// second waits for its slot. Ends with the client's close
// (browser.close(), which sends Browser.close). Prints what it loaded and
// the size of each big message.
//
// env: CLIENT, RELAY, BASE, RUN, IDLE_MS, SHOT, TAIL_MS.
import puppeteer from 'puppeteer-core';
import { chromium } from 'playwright-core';
import { env, sleep, stepLog } from './lib.mjs';

const client = env('CLIENT');
const relay = env('RELAY');
const base = env('BASE');
const run = env('RUN');
const idle = Number(env('IDLE_MS'));
const tail = Number(env('TAIL_MS'));
const shot = process.env.SHOT === '1';
const page = (step) => `${base}/page?` + new URLSearchParams({ run, s: String(step) });

let browser, p;
if (client === 'puppeteer') {
  browser = await puppeteer.connect({ browserURL: relay, protocolTimeout: 60000 });
  p = await browser.newPage();
} else {
  browser = await chromium.connectOverCDP(relay, { timeout: 60000 });
  const context = browser.contexts()[0] ?? (await browser.newContext());
  p = await context.newPage();
}
const log = stepLog();
const titles = [];
const big = [];
const load = async (step) => {
  await p.goto(page(step));
  titles.push(await p.title());
};
const bigMessage = async () => {
  if (shot) {
    await p.goto(`${base}/noise?run=${run}`);
    const png = await p.screenshot({ fullPage: true });
    big.push(png.length);
  } else {
    big.push(await p.evaluate(() => 'x'.repeat(1.5e6).length));
  }
};
await log.run('load 1', () => load(1));
await log.run('big 1', bigMessage);
await log.run('idle 1', () => sleep(idle));
await log.run('load 2', () => load(2));
await log.run('load 3', () => load(3));
await log.run('idle 2', () => sleep(idle));
await log.run('load 4', () => load(4));
await log.run('load 5', () => load(5));
await log.run('big 2', bigMessage);
await log.run('tail', () => sleep(tail));
await log.run('close', () => browser.close());
console.log(JSON.stringify({ titles, big, steps: log.steps }));
